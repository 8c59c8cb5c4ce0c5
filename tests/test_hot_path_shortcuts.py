"""Shortcuts on hot paths (linkers settled without a seek, batched ingest, compaction, block size) give the same stores as the long way."""

from __future__ import annotations

import gc

from cablestore import TEXT, Store
from cablestore.authoring.workload import Workload

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



def test_a_compacted_store_takes_at_most_2_4_times_the_raw_post_bytes(tmp_path):
    """32 KB blocks, format 2 (no reverse entry per post): 2.2x in format 1 with reverse entries, less now."""
    bufs = list(Workload(seed=5, posts=3000))
    with Store(tmp_path / "s", now=lambda: NOW + 10**12) as s:
        s.ingest_many(bufs)
    with Store(tmp_path / "s", now=lambda: NOW + 10**12) as s:
        s.db.compact_range()
        raw = sum(len(v) for _, v in s.items(b"!post!"))
    tables = sum(f.stat().st_size for f in (tmp_path / "s").iterdir() if f.suffix == ".ldb")
    assert tables <= 2.4 * raw


def test_a_store_written_with_small_blocks_opens_and_reads_with_the_new_size(tmp_path, monkeypatch):
    from cablestore.store.lifecycle import opening

    bufs = list(Workload(seed=6, posts=400))
    monkeypatch.setattr(opening, "BLOCK_SIZE", 4096)
    with Store(tmp_path / "s", now=lambda: NOW + 10**12) as s:
        s.ingest_many(bufs)
        before = dump(s)
    monkeypatch.undo()
    with Store(tmp_path / "s", now=lambda: NOW + 10**12) as s:
        assert dump(s) == before
        s.db.compact_range()  # rewritten with 32 KB blocks
        assert dump(s) == before and s.check().consistent
