"""The shortcuts the scale work took on hot paths give the same stores as the long way."""

from __future__ import annotations

import gc

from cablestore import TEXT, Store
from cablestore.workload import Workload

from .conftest import NOW, dump, post


def test_linkers_settled_without_a_seek_keep_heads_right_as_they_come_and_go(store, alice, bob):
    """A new linker's group is settled without looking up the stored winner; the cache must not keep a wrong one."""
    target = store.ingest(post(alice, TEXT, NOW, channel="dev", text="t"))
    assert store.heads("dev") == [target]
    linkers = []
    for i, kp in enumerate((alice, bob, alice)):
        linkers.append(store.ingest(post(kp, TEXT, NOW + 1 + i, links=[target], channel="dev", text=f"l{i}")))
        assert target not in store.heads("dev") and store.check().consistent
    assert store.heads("dev") == sorted(linkers)
    for h in sorted(linkers, reverse=True):  # the highest rank (hash) first: the stored winner goes first
        store.delete(h)
        assert store.check().consistent
    assert store.heads("dev") == [target]


def test_a_linker_and_its_target_in_one_batch_and_across_batches_give_the_same_store(tmp_path):
    bufs = list(Workload(seed=9, posts=1200))
    with Store(tmp_path / "one", now=lambda: NOW + 10**12) as one:
        one.ingest_many(bufs)
        whole = dump(one)
    with Store(tmp_path / "many", now=lambda: NOW + 10**12) as many:
        for i in range(0, len(bufs), 7):
            many.ingest_many(bufs[i : i + 7])
        assert dump(many) == whole and many.check().consistent


def test_ingest_many_leaves_garbage_collection_as_it_found_it(store, alice):
    assert gc.isenabled()
    store.ingest_many([post(alice, TEXT, NOW, channel="a", text="x")])
    assert gc.isenabled()
    gc.disable()
    try:
        store.ingest_many([post(alice, TEXT, NOW + 1, channel="a", text="y")])
        assert not gc.isenabled()
    finally:
        gc.enable()

