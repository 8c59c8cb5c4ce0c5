"""Bad arguments and damaged records give CableErrors, never another library's exception."""

from __future__ import annotations

import pytest

from cablestore import INFO, JOIN, TEXT, TOPIC
from cablestore.errors import CorruptRecordError, QueryError

from .conftest import NOW, post


@pytest.mark.parametrize("name", ["\ud800", 7, None, b"general"])
def test_a_channel_name_that_is_no_text_is_a_query_error(store, name):
    for query in (store.channel_time_range, store.channel_state, store.topic, store.members):
        with pytest.raises(QueryError):
            query(name)


@pytest.mark.parametrize("post_type", [300, -1, 10, "text", 1.0])
def test_author_posts_with_a_bad_type_is_a_query_error(store, alice, post_type):
    with pytest.raises(QueryError):
        store.author_posts(alice.public_key, post_type)


def test_author_posts_with_a_good_type_still_answers(store, alice):
    h = store.ingest(post(alice, JOIN, NOW, channel="a"))
    assert store.author_posts(alice.public_key, JOIN) == [h] and store.author_posts(alice.public_key, TEXT) == []


def test_damaged_text_values_are_corrupt_record_errors(store, alice):
    store.ingest(post(alice, TOPIC, NOW - 2, channel="a", topic="t"))
    store.ingest(post(alice, INFO, NOW - 1, info=[("name", "alice")]))
    from cablestore.keyspace.keys import channel_key
    from cablestore.views import user

    store.db.put(b"!channel!" + channel_key("a") + b"t", b"\xff\xfe")
    store.db.put(user.property_key(alice.public_key, "name"), b"\xff\xfe")
    with pytest.raises(CorruptRecordError):
        store.topic("a")
    with pytest.raises(CorruptRecordError):
        store.name(alice.public_key)
    with pytest.raises(CorruptRecordError):
        store.user_info(alice.public_key)


def test_a_damaged_channel_key_is_a_corrupt_record_error(store, alice):
    store.ingest(post(alice, JOIN, NOW, channel="a"))
    store.db.put(b"!channel!\xff\xfe\x00\x01m" + bytes(32), b"\x01")
    with pytest.raises(CorruptRecordError):
        store.channel_list()


def test_a_latest_winner_removed_under_the_store_does_not_break_the_next_ingest(store, alice):
    """A repair or a recovery writes under the store's winner cache: a stale entry is re-read, never decoded as None."""
    later = store.ingest(post(alice, JOIN, NOW - 1, channel="a"))
    for key, _ in list(store.items()):
        if later in key:
            store.db.delete(key)  # as a repair removing a post would
    earlier = store.ingest(post(alice, JOIN, NOW - 2, channel="a"))
    assert store.members("a") == [alice.public_key] and store.check().consistent
    assert store.get(earlier) is not None
