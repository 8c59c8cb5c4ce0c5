"""The store's create/update/delete flows, per post type, on real LevelDB."""

from __future__ import annotations

import threading

import pytest

from cablestore import DELETE, INFO, JOIN, LEAVE, TEXT, TOPIC, Store, post_hash
from cablestore.errors import (
    DeletedPostError,
    FutureTimestampError,
    QueryError,
    SignatureError,
    StoreClosedError,
    StoreLockedError,
    TruncatedError,
    UnauthorizedDeleteError,
    UnknownPostTypeError,
)
from cablestore.keyspace.keys import WEEK_MS

from .conftest import NOW, dump, keypair, post

H = post_hash


def text(kp, ts, channel="general", body="hi", links=()):
    return post(kp, TEXT, ts, links, channel=channel, text=body)


def delete(kp, ts, *targets):
    return post(kp, DELETE, ts, hashes=tuple(H(t) if len(t) != 32 else t for t in targets))


# --- post/text -------------------------------------------------------------


def test_text_create_and_delete_flow(store, alice):
    t = text(alice, 1000)
    h = store.ingest(t)
    assert h == H(t) and store.get(h) == t and store.get(h.hex()) == t
    assert store.channel_time_range("general") == [h]
    assert store.author_posts(alice.public_key, TEXT) == [h]
    assert store.members("general") == [alice.public_key]  # a text post implies membership

    d = delete(alice, 2000, t)
    dh = store.ingest(d)
    assert store.get(h) is None
    assert store.is_deleted(h)
    assert store.channel_time_range("general") == [dh]  # the delete is listed where the text was
    assert store.author_posts(alice.public_key, TEXT) == []
    assert store.author_posts(alice.public_key) == [dh]
    assert store.members("general") == []
    assert store.channel_list() == []  # nothing left that names the channel
    [tomb] = store.tombstones(h)
    assert (tomb.by, tomb.author, tomb.post_type, tomb.timestamp, tomb.channels) == (dh, alice.public_key, TEXT, 1000, ("general",))
    # no view entry of the text survives: nothing in the store mentions its hash except tombstones
    leftovers = [k for k, _ in dump(store) if h in k and not k.startswith(b"!deleted!")]
    assert leftovers == []


def test_deleted_post_is_refused_when_it_comes_back(store, alice):
    t = text(alice, 1000)
    store.ingest(t)
    store.ingest(delete(alice, 2000, t))
    before = dump(store)
    with pytest.raises(DeletedPostError):
        store.ingest(t)
    assert dump(store) == before


# --- post/delete -------------------------------------------------------------


def test_delete_of_delete_forgets_tombstones(store, alice):
    t = text(alice, 1000)
    store.ingest(t)
    d1 = delete(alice, 2000, t)
    store.ingest(d1)
    d2 = delete(alice, 3000, d1)
    h2 = store.ingest(d2)
    assert store.get(H(d1)) is None and store.is_deleted(H(d1))
    assert not store.is_deleted(H(t))  # forgotten: the text may be stored again
    assert store.channel_time_range("general") == [h2]  # d2 listed where d1 was
    store.ingest(t)
    assert store.get(H(t)) == t
    assert store.channel_time_range("general") == [h2, H(t)]


def test_delete_of_only_another_authors_posts_is_refused(store, alice, bob):
    theirs = text(bob, 1001)
    store.ingest(theirs)
    before = dump(store)
    forged = delete(alice, 2000, theirs)
    with pytest.raises(UnauthorizedDeleteError):
        store.ingest(forged)
    # Nothing stored or indexed: only who wrote the refused delete is kept (docs/design.md "Arrival order").
    assert [kv for kv in dump(store) if not kv[0].startswith(b"!refused!")] == before
    assert store.db.get(b"!refused!" + H(forged)) == alice.public_key


def test_delete_of_own_and_another_authors_posts_deletes_only_the_own(store, alice, bob):
    mine, theirs = text(alice, 1000), text(bob, 1001)
    store.ingest(mine)
    store.ingest(theirs)
    dh = store.ingest(delete(alice, 2000, mine, theirs))
    assert store.get(H(mine)) is None and store.is_deleted(H(mine))
    assert store.get(H(theirs)) == theirs and not store.is_deleted(H(theirs))
    claim = next(t for t in store.tombstones(H(theirs)))
    assert (claim.by, claim.author, claim.channels, claim.authorized) == (dh, bob.public_key, (), False)
    assert store.channel_time_range("general") == [dh, H(theirs)]
    assert store.check().consistent


def test_pre_emptive_delete_blocks_only_the_deleter(store, alice, bob):
    t = text(alice, 1000)
    forged = delete(bob, 500, t)  # bob deletes alice's post before it arrives
    store.ingest(forged)
    assert store.is_deleted(H(t))
    store.ingest(t)  # not bob's to delete: accepted, and bob's delete is retracted
    assert store.get(H(t)) == t and not store.is_deleted(H(t))
    assert store.get(H(forged)) is None and store.tombstones(H(t)) == []

    t2 = text(alice, 1100, body="later")
    dh = store.ingest(delete(alice, 1200, t2))  # alice deletes her own post before it arrives
    assert store.channel_time_range("general") == [H(t)]  # the target's channel is unknown yet
    with pytest.raises(DeletedPostError):
        store.ingest(t2)
    # refused, but the tombstone learned what t2 was: the delete is listed where t2 belonged
    assert store.get(H(t2)) is None and store.channel_time_range("general") == [dh, H(t)]
    [tomb] = store.tombstones(H(t2))
    assert (tomb.author, tomb.post_type, tomb.timestamp, tomb.channels) == (alice.public_key, TEXT, 1100, ("general",))
    assert store.check().consistent


def test_delete_of_unknown_and_known_targets(store, alice):
    t = text(alice, 1000)
    store.ingest(t)
    unknown = bytes(32)
    dh = store.ingest(delete(alice, 2000, t, unknown))
    assert store.is_deleted(unknown)
    [tomb] = store.tombstones(unknown)
    assert tomb.by == dh and tomb.author is None and tomb.channels == ()


# --- post/info ------------------------------------------------------------------


def info(kp, ts, name):
    return post(kp, INFO, ts, info=(("name", name),))


def test_info_latest_name_rederived_after_delete(store, alice):
    a, b, c = info(alice, 1000, "a"), info(alice, 3000, "c"), info(alice, 2000, "b")
    for p in (a, b, c):
        store.ingest(p)
    assert store.name(alice.public_key) == "c"  # latest by timestamp, not arrival
    store.ingest(delete(alice, 4000, b))
    assert store.name(alice.public_key) == "b"
    store.ingest(delete(alice, 4001, c))
    store.ingest(delete(alice, 4002, a))
    assert store.name(alice.public_key) is None
    assert store.user_info(alice.public_key) == {}


def test_info_replaces_every_property(store, alice):
    store.ingest(post(alice, INFO, 1000, info=(("name", "al"), ("bio", "hi"))))
    store.ingest(post(alice, INFO, 2000, info=(("bio", "new"),)))
    assert store.user_info(alice.public_key) == {"bio": "new"}
    assert store.name(alice.public_key) is None


def test_deleted_info_is_listed_under_the_authors_channels(store, alice):
    store.ingest(post(alice, JOIN, 900, channel="general"))
    store.ingest(post(alice, JOIN, 901, channel="Other"))
    store.ingest(post(alice, LEAVE, 902, channel="other"))
    i = info(alice, 1000, "al")
    store.ingest(i)
    dh = store.ingest(delete(alice, 2000, i))
    assert store.channel_time_range("general") == [dh]
    assert store.channel_time_range("other") == []  # she had left it
    assert store.channel_state("general") == [H(post(alice, JOIN, 900, channel="general"))]


# --- post/topic -------------------------------------------------------------------


def test_topic_latest_and_rederived(store, alice, bob):
    t1 = post(alice, TOPIC, 1000, channel="general", topic="one")
    t2 = post(bob, TOPIC, 2000, channel="General", topic="two")
    store.ingest(t2)
    store.ingest(t1)
    assert store.topic("GENERAL") == "two"
    assert store.channel_state("general")[0] == H(t2)
    store.ingest(delete(bob, 3000, t2))
    assert store.topic("general") == "one"
    assert store.channel_state("general", historic=True)[:1] == [H(t1)]
    store.ingest(delete(alice, 3001, t1))
    assert store.topic("general") == ""


def test_topic_tie_broken_by_higher_hash(store, alice, bob):
    t1 = post(alice, TOPIC, 1000, channel="c", topic="x")
    t2 = post(bob, TOPIC, 1000, channel="c", topic="y")
    for p in (t1, t2):
        store.ingest(p)
    winner = max((H(t1), "x"), (H(t2), "y"))[1]
    assert store.topic("c") == winner


# --- post/join and post/leave ------------------------------------------------------


def test_membership_flow_and_rederivation(store, alice):
    j = post(alice, JOIN, 1000, channel="general")
    leave = post(alice, LEAVE, 2000, channel="general")
    j2 = post(alice, JOIN, 3000, channel="general")
    store.ingest(j)
    assert store.members("general") == [alice.public_key]
    store.ingest(leave)
    assert store.members("general") == []
    assert store.channel_list() == ["general"]  # an ex-member keeps the channel known
    store.ingest(j2)
    assert store.members("general") == [alice.public_key]
    assert store.channel_state("general") == [H(j2)]
    store.ingest(delete(alice, 4000, j2))
    assert store.members("general") == []  # back to the leave
    assert store.channel_state("general") == [H(leave)]
    store.ingest(delete(alice, 4001, leave))
    assert store.members("general") == [alice.public_key]  # back to the first join
    assert store.channel_state("general", historic=True) == [H(j)]


def test_leave_older_than_text_keeps_membership(store, alice):
    store.ingest(post(alice, LEAVE, 1000, channel="c"))
    store.ingest(text(alice, 2000, channel="c"))
    assert store.members("c") == [alice.public_key]


# --- ordering -------------------------------------------------------------------------


def test_ten_digit_timestamps_sort_before_thirteen_digit(store, alice):
    small = text(alice, 9_876_543_210, body="old")
    big = text(alice, 1_676_993_016_405, body="new")
    store.ingest(big)
    store.ingest(small)
    assert store.channel_time_range("general") == [H(big), H(small)]
    assert store.channel_time_range("general", 0, 1_000_000_000_000) == [H(small)]


def test_equal_timestamps_never_collide_and_order_by_hash(store, alice, bob):
    posts = [text(kp, 5000, body=str(i)) for i, kp in enumerate([alice, bob, alice, bob])]
    for p in posts:
        store.ingest(p)
    got = store.channel_time_range("general")
    assert got == sorted((H(p) for p in posts), reverse=True)


def test_time_range_bounds_and_limit(store, alice):
    posts = [text(alice, ts, body=str(ts)) for ts in (100, 200, 300, 400)]
    for p in posts:
        store.ingest(p)
    hs = [H(p) for p in posts]
    assert store.channel_time_range("general", 200, 400) == [hs[2], hs[1]]  # start in, end out
    assert store.channel_time_range("general", 0, 0, 2) == [hs[3], hs[2]]
    assert store.channel_time_range("general", 401, 0) == []
    assert store.channel_time_range("general", 0, 2**64 + 5) == hs[::-1]
    with pytest.raises(QueryError):
        store.channel_time_range("general", -1)


# --- channel names -----------------------------------------------------------------------


@pytest.mark.parametrize("name,other", [("a", "a!b"), ("a!", "a"), ("a/b", "a"), ("x\x00y", "x"), ("ünï", "ün"), ("Dev", "dev-")])
def test_channel_names_do_not_leak_into_each_other(store, alice, name, other):
    p1, p2 = text(alice, 1000, channel=name), text(alice, 1001, channel=other)
    store.ingest(p1)
    store.ingest(p2)
    assert store.channel_time_range(name) == [H(p1)]
    assert store.channel_time_range(other) == [H(p2)]
    assert store.channel_list() == sorted({name.casefold(), other.casefold()}, key=lambda s: s.encode())


def test_channels_are_case_insensitive(store, alice, bob):
    p1 = text(alice, 1000, channel="Dev-Talk")
    p2 = text(bob, 1001, channel="dev-talk")
    store.ingest(p1)
    store.ingest(p2)
    assert store.channel_list() == ["dev-talk"]
    assert store.channel_time_range("DEV-TALK") == [H(p2), H(p1)]
    assert store.members("Dev-talk") == sorted([alice.public_key, bob.public_key])


def test_channel_list_offset_and_limit(store, alice):
    for i, name in enumerate(["b", "a", "ç", "c"]):
        store.ingest(text(alice, 1000 + i, channel=name))
    assert store.channel_list() == ["a", "b", "c", "ç"]
    assert store.channel_list(1, 2) == ["b", "c"]
    assert store.channel_list(3) == ["ç"]


# --- refused input leaves the store byte-identical -----------------------------------------


def test_refused_inputs_change_nothing(store, alice):
    store.ingest(text(alice, 1000))
    good = text(alice, 2000)
    forged = good[:32] + bytes(64) + good[96:]
    other_key = keypair("mallory").public_key + good[32:]
    cases = [
        (forged, SignatureError),
        (other_key, SignatureError),
        (good[:-1], TruncatedError),
        (text(alice, NOW + WEEK_MS), FutureTimestampError),
        (good[:96] + b"\x00\x0a" + good[98:], UnknownPostTypeError),
    ]
    before = dump(store)
    for buf, exc in cases:
        with pytest.raises(exc):
            store.ingest(buf)
        [result] = store.ingest_many([buf])
        assert isinstance(result.error, exc)
    assert dump(store) == before
    store.ingest(text(alice, NOW + WEEK_MS - 1))  # just inside the window


def test_ingest_many_reports_per_item_and_keeps_going(store, alice, bob):
    t = text(alice, 1000)
    bad = t[:-1]
    theirs = text(bob, 1001)
    results = store.ingest_many([t, bad, theirs, delete(alice, 2000, theirs), t])
    assert [r.ok for r in results] == [True, False, True, False, True]
    assert isinstance(results[1].error, TruncatedError)
    assert isinstance(results[3].error, UnauthorizedDeleteError)
    assert [r.new for r in results] == [True, False, True, False, False]  # the last is a duplicate
    assert store.channel_time_range("general") == [H(theirs), H(t)]


def test_ingest_many_sees_earlier_posts_of_the_same_batch(tmp_path, alice):
    posts = [post(alice, JOIN, 1000, channel="c"), text(alice, 1001, channel="c")]
    posts.append(delete(alice, 1002, posts[1]))
    posts.append(post(alice, LEAVE, 1003, channel="c"))
    posts.append(delete(alice, 1004, posts[3]))
    with Store(tmp_path / "one", now=lambda: NOW) as one:
        for p in posts:
            one.ingest(p)
        singly = dump(one)
    with Store(tmp_path / "many", now=lambda: NOW) as many:
        assert all(r.ok for r in many.ingest_many(posts))
        assert dump(many) == singly
        assert many.members("c") == [alice.public_key]


def test_duplicate_ingest_is_idempotent(store, alice):
    t = text(alice, 1000)
    store.ingest(t)
    before = dump(store)
    assert store.ingest(t) == H(t)
    assert dump(store) == before


# --- local delete and purge -------------------------------------------------------------------


def test_local_delete_leaves_no_tombstone(store, alice):
    t = text(alice, 1000)
    store.ingest(t)
    assert store.delete(H(t).hex()) is True
    assert store.get(H(t)) is None and not store.is_deleted(H(t))
    assert store.delete(H(t)) is False
    store.ingest(t)  # may come back
    assert store.get(H(t)) == t


def test_purge_author_removes_everything_they_wrote(store, alice, bob):
    keep = text(bob, 1000)
    store.ingest(keep)
    bob_state = dump(store)
    for p in (post(alice, JOIN, 1, channel="x"), text(alice, 2), info(alice, 3, "al"), post(alice, TOPIC, 4, channel="general", topic="t")):
        store.ingest(p)
    assert store.purge_author(alice.public_key) == 4
    assert dump(store) == bob_state


# --- lifecycle ---------------------------------------------------------------------------------


def test_second_open_is_a_clear_error(tmp_path):
    with Store(tmp_path / "s"):
        with pytest.raises(StoreLockedError):
            Store(tmp_path / "s")


def test_closed_store_raises(tmp_path, alice):
    s = Store(tmp_path / "s")
    s.close()
    with pytest.raises(StoreClosedError):
        s.ingest(text(alice, 1))


def test_reopen_keeps_everything(tmp_path, alice):
    t = text(alice, 1000)
    with Store(tmp_path / "s", now=lambda: NOW) as s:
        s.ingest(t)
        s.ingest(delete(alice, 2000, t))
        before = dump(s)
    with Store(tmp_path / "s", now=lambda: NOW) as s:
        assert dump(s) == before
        with pytest.raises(DeletedPostError):  # deletes are remembered across restarts
            s.ingest(t)


def test_readers_see_consistent_snapshots_while_writing(store, alice):
    """Every channel state read sees a join and its leave together or not at all."""
    stop = threading.Event()
    errors = []

    def reader():
        while not stop.is_set():
            hashes = store.channel_state("c", historic=True)
            if len(hashes) % 2:
                errors.append(len(hashes))

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(150):
        store.ingest_many([post(alice, JOIN, 10 * i, channel="c"), post(alice, LEAVE, 10 * i + 1, channel="c")])
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
    assert len(store.channel_state("c", historic=True)) == 300


def test_second_process_gets_store_locked_error(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys\nfrom cablestore import Store\nfrom cablestore.errors import StoreLockedError\n"
        "try:\n    Store(sys.argv[1])\nexcept StoreLockedError as e:\n    print('locked:', e); sys.exit(3)\n"
    )
    with Store(tmp_path / "s"):
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s")], capture_output=True, text=True)
    assert out.returncode == 3, out.stderr
    assert "open in another process" in out.stdout
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s")], capture_output=True, text=True)
    assert done.returncode == 0  # released on close


def test_discarded_delete_that_comes_back_keeps_what_it_deleted(store, alice):
    t = text(alice, 1000, channel="c")
    d = delete(alice, 2000, t)
    store.ingest_many([t, d])
    listed = store.channel_time_range("c")
    assert listed == [H(d)]
    assert store.delete(H(d))
    assert store.channel_time_range("c") == [] and store.is_deleted(H(t))  # the deletion still holds
    store.ingest(d)  # a peer sends it again
    assert store.channel_time_range("c") == listed
    [tomb] = store.tombstones(H(t))
    assert tomb.channels == ("c",) and tomb.author == alice.public_key
    assert store.check().consistent


def test_deleting_a_discarded_delete_cannot_lift_its_deletion(store, alice):
    t = text(alice, 1000, channel="c")
    d1 = delete(alice, 2000, t)
    store.ingest_many([t, d1])
    store.delete(H(d1))
    store.ingest(delete(alice, 3000, d1))
    with pytest.raises(DeletedPostError):  # documented: the store no longer knows what d1 deleted
        store.ingest(t)


@pytest.mark.parametrize("batch", ["alone", "after-a-text-in-a-new-channel", "after-leaving"])
def test_a_deleted_post_info_is_listed_in_its_authors_channels_as_of_the_delete(tmp_path, alice, batch):
    """The channels of a deleted post/info are its author's member channels, with the batch's own posts counted."""
    with Store(tmp_path / "s", now=lambda: NOW) as store:
        store.ingest(post(alice, JOIN, NOW - 100, channel="a"))
        info = post(alice, INFO, NOW - 90, info=[("name", "alice")])
        store.ingest(info)
        delete = post(alice, DELETE, NOW - 10, hashes=[post_hash(info)])
        before = {"alone": [], "after-a-text-in-a-new-channel": [post(alice, TEXT, NOW - 20, channel="b", text="hi")],
                  "after-leaving": [post(alice, LEAVE, NOW - 20, channel="a")]}[batch]
        assert all(r.ok for r in store.ingest_many([*before, delete]))
        listed = {c for c in ("a", "b") if post_hash(delete) in store.channel_time_range(c)}
        assert listed == {"alone": {"a"}, "after-a-text-in-a-new-channel": {"a", "b"}, "after-leaving": set()}[batch]
        assert store.check().consistent
