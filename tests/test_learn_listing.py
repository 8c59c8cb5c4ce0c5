"""A post/delete of posts a store never held is listed where a peer listed it (``Store.learn_listing``)."""

from __future__ import annotations

import pytest

from cablestore import DELETE, TEXT, CableError, Store, post_hash
from cablestore.errors import QueryError

from .conftest import keypair, post
from .peer_helpers import WALL

T0 = WALL - 3_600_000


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "s") as s:
        yield s


def _delete(author, targets, ts=T0 + 50):
    return post(author, DELETE, ts, hashes=[post_hash(t) for t in targets])


def test_a_delete_of_an_unknown_post_is_listed_where_a_peer_listed_it(store):
    alice = keypair("alice")
    text = post(alice, TEXT, T0, channel="general", text="gone")
    d = store.ingest(_delete(alice, [text]))
    assert store.channel_time_range("general") == []  # the delete names no channel of its own
    assert store.learn_listing("General", [d]) == 1  # any spelling: the canonical one is keyed
    assert store.channel_time_range("general") == [d]
    assert store.learn_listing("general", [d]) == 0  # already listed: nothing written
    assert store.check().consistent  # the rebuild derives the same entry from the tombstone


def test_the_target_itself_wins_over_a_listing(store):
    alice = keypair("alice")
    text = post(alice, TEXT, T0, channel="general", text="held")
    store.ingest(text)
    d = store.ingest(_delete(alice, [text]))
    assert store.channel_time_range("general") == [d]
    assert store.learn_listing("elsewhere", [d]) == 0
    assert store.channel_time_range("elsewhere") == []


def test_a_listing_and_the_late_target_add_up(store):
    alice = keypair("alice")
    text = post(alice, TEXT, T0, channel="general", text="late")
    d = store.ingest(_delete(alice, [text]))
    store.learn_listing("listed", [d])
    with pytest.raises(CableError):
        store.ingest(text)  # deleted by its author: refused, but the tombstone learns its channel
    assert store.channel_time_range("general") == [d]
    assert store.channel_time_range("listed") == [d]
    assert store.check().consistent


def test_a_listing_of_an_unauthorized_claim_is_withdrawn_when_the_target_shows_its_author(store):
    alice, mallory = keypair("alice"), keypair("mallory")
    own = post(mallory, TEXT, T0, channel="general", text="mine")
    store.ingest(own)
    theirs = post(alice, TEXT, T0 + 1, channel="general", text="alice's")
    d = store.ingest(_delete(mallory, [own, theirs]))  # mixed: stored, deletes mallory's post only
    store.learn_listing("elsewhere", [d])  # a peer lies about where the claim on alice's post was
    assert store.channel_time_range("elsewhere") == [d]
    store.ingest(theirs)  # alice's post arrives: the claim on it was never authorized
    assert store.channel_time_range("elsewhere") == []
    assert store.channel_time_range("general") == [d, post_hash(theirs)]
    assert store.check().consistent


def test_texts_unknown_hashes_and_bad_channels(store):
    alice = keypair("alice")
    t = store.ingest(post(alice, TEXT, T0, channel="general", text="x"))
    assert store.learn_listing("elsewhere", [t, b"\x01" * 32]) == 0
    assert store.channel_time_range("elsewhere") == []
    with pytest.raises(QueryError):
        store.learn_listing("", [t])


def test_listings_given_to_ingest_many_write_what_learn_listing_after_it_writes(tmp_path):
    # A sync stores a response's posts and what its listings taught the post/deletes in one WriteBatch;
    # the rows are the same as learn_listing's after the ingest (one delete new, one held already, one refused).
    from .conftest import dump

    alice, bob = keypair("alice"), keypair("bob")
    texts = [post(alice, TEXT, T0 + i, channel="general", text=f"t{i}") for i in range(3)]
    new, held = _delete(alice, [texts[0]], T0 + 50), _delete(alice, [texts[1], texts[2]], T0 + 51)
    refused = _delete(bob, [post(bob, TEXT, T0, channel="x", text="y")], T0 + 52)[:-1] + b"!"  # a bad signature
    listed = [("General", post_hash(new)), ("elsewhere", post_hash(new)), ("general", post_hash(held)), ("general", post_hash(refused))]
    with Store(tmp_path / "after") as after, Store(tmp_path / "together") as together:
        for s in (after, together):
            s.ingest(held)
        results = after.ingest_many([new, held, refused])
        for channel, h in listed:
            after.learn_listing(channel, [h])
        assert [r.ok for r in together.ingest_many([new, held, refused], listings=listed)] == [r.ok for r in results] == [True, True, False]
        assert together.channel_time_range("general") == after.channel_time_range("general") != []
        assert together.channel_time_range("elsewhere") == [post_hash(new)]
        assert dump(together) == dump(after)
        assert together.check().consistent
        with pytest.raises(QueryError):
            together.ingest_many([texts[0]], listings=[("", post_hash(new))])  # a bad channel name: nothing written
        assert post_hash(texts[0]) not in together
