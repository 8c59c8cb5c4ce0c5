"""Store.subscribe: listeners hear every commit that adds or removes posts, after it lands."""

from cablestore import DELETE, JOIN, TEXT
from cablestore.errors import StoreError
from cablestore.keyspace.keys import LOCAL

from .conftest import NOW, dump, post


def test_listeners_hear_ingest_ingest_many_and_delete(store, alice):
    heard = []
    unsubscribe = store.subscribe(heard.append)
    j = post(alice, JOIN, NOW - 3, channel="a")
    t = post(alice, TEXT, NOW - 2, channel="a", text="hi")
    hj = store.ingest(j)
    assert [h for h, _ in heard[-1].added] == [hj]
    # the post is readable when the listener runs: notified after commit
    seen_inside = []
    store.subscribe(lambda c: seen_inside.append([store.get(h) is not None for h, _ in c.added]))
    results = store.ingest_many([t])
    assert heard[-1].added[0][0] == results[0].hash and seen_inside[-1] == [True]
    d = post(alice, DELETE, NOW - 1, hashes=[results[0].hash])
    hd = store.ingest(d)
    assert heard[-1].removed == (results[0].hash,) and heard[-1].added[0][0] == hd
    n = len(heard)
    store.ingest(j)  # a duplicate changes nothing and is not announced
    assert len(heard) == n
    unsubscribe()
    store.delete(hd)
    assert len(heard) == n


def test_a_failing_listener_does_not_fail_the_ingest(store, alice):
    def boom(change):
        raise RuntimeError("listener bug")

    store.subscribe(boom)
    h = store.ingest(post(alice, JOIN, NOW, channel="a"))
    assert store.get(h) is not None


def test_extra_keys_land_in_the_same_batch_and_only_under_local(store, alice):
    h = store.ingest(post(alice, JOIN, NOW, channel="a"), extra={LOCAL + b"clock": b"1"})
    assert store.db.get(LOCAL + b"clock") == b"1" and store.get(h) is not None
    before = dump(store)
    try:
        store.ingest(post(alice, JOIN, NOW, channel="b"), extra={b"!chat!x": b""})
    except StoreError:
        pass
    else:
        raise AssertionError("a key outside !local! was accepted")
    assert dump(store) == before
