"""Bulk reindex: every derived view rebuilt from primary data, byte-identical to incremental ingest."""

from __future__ import annotations

import random
from pathlib import Path

from cablestore import Store
from cablestore.cli import main
from cablestore.reindex import reindex
from cablestore.rebuild.recompute import is_primary
from cablestore.workload import Workload, read_posts

from .conftest import NOW, dump

FIXTURE = Path(__file__).parent / "data" / "cablejs-0.2.1-s7-2000" / "posts.bin"
WORKLOAD = list(Workload(seed=5, posts=3000))  # deletes, deletes of deletes, joins/leaves, topics, infos


def _ingest(path, bufs, batch=100) -> list:
    with Store(path, now=lambda: NOW + 10**12) as s:
        for i in range(0, len(bufs), batch):
            s.ingest_many(bufs[i : i + batch])
        return dump(s)


def _damage(path) -> None:
    """Drop most of every view, add a stray derived key, change a latest value."""
    with Store(path, now=lambda: NOW) as s:
        rng = random.Random(3)
        derived = [k for k, _ in s.items() if not is_primary(k)]
        with s.db.write_batch() as wb:
            for key in rng.sample(derived, len(derived) * 3 // 4):
                wb.delete(key)
            wb.put(b"!chat!stray\x00\x01" + bytes(40), b"")
            wb.put(derived[-1], b"\x07")


def test_reindex_of_the_fixture_is_byte_identical_to_ingest(tmp_path):
    before = _ingest(tmp_path / "s", read_posts(FIXTURE))
    with Store(tmp_path / "s") as s:
        report = reindex(s)
        assert dump(s) == before
    assert report.posts == report.indexed > 0 and not report.faults
    assert report.written == report.dropped == sum(1 for k, _ in before if not is_primary(k))


def test_reindex_restores_damaged_views_of_a_workload_with_deletes(tmp_path):
    before = _ingest(tmp_path / "s", WORKLOAD)
    assert any(k.startswith(b"!deleted!") for k, _ in before)  # the workload deletes, and deletes deletes
    _damage(tmp_path / "s")
    with Store(tmp_path / "s") as s:
        assert dump(s) != before
        reindex(s)
        assert dump(s) == before
        assert s.check().consistent


def test_reindexed_store_keeps_ingesting_like_an_ingested_one(tmp_path):
    head, tail = WORKLOAD[:2000], WORKLOAD[2000:]
    whole = _ingest(tmp_path / "whole", WORKLOAD)
    _ingest(tmp_path / "s", head)
    _damage(tmp_path / "s")
    with Store(tmp_path / "s") as s:
        reindex(s)
    assert _ingest(tmp_path / "s", tail) == whole


def test_reindex_leaves_faulty_posts_for_repair_and_gives_them_no_entries(tmp_path):
    before = _ingest(tmp_path / "s", WORKLOAD[:500])
    with Store(tmp_path / "s") as s:
        h = next(k for k, _ in before if k.startswith(b"!post!"))
        s.db.put(h, b"not a post")
        report = reindex(s)
        assert [f.kind for f in report.faults] == ["bad_hash"]
        assert s.db.get(h) == b"not a post"  # left in place
        check = s.check()
        assert [f.kind for f in check.faults] == ["bad_hash"] and not (check.missing or check.extra or check.different)


def test_repair_of_a_store_missing_most_views_reindexes(tmp_path):
    before = _ingest(tmp_path / "s", WORKLOAD)
    _damage(tmp_path / "s")
    with Store(tmp_path / "s") as s:
        report = s.check(fix=True)
        assert report.consistent and report.repaired["reindexed"] is True
        assert dump(s) == before


def test_repair_of_a_few_missing_entries_writes_only_the_difference(tmp_path):
    before = _ingest(tmp_path / "s", WORKLOAD[:800])
    with Store(tmp_path / "s") as s:
        key = next(k for k, _ in before if k.startswith(b"!chat!"))
        s.db.delete(key)
        report = s.check(fix=True)
        assert report.consistent and "reindexed" not in report.repaired and report.repaired["written"] == 1
        assert dump(s) == before


def test_cli_reindex(tmp_path, capsys):
    before = _ingest(tmp_path / "s", WORKLOAD[:600])
    _damage(tmp_path / "s")
    assert main(["reindex", str(tmp_path / "s"), "--json"]) == 0
    out = capsys.readouterr().out
    stored = sum(1 for k, _ in before if k.startswith(b"!post!"))
    assert f'"indexed": {stored}' in out and stored > 500
    with Store(tmp_path / "s") as s:
        assert dump(s) == before
    assert main(["reindex", str(tmp_path / "missing")]) == 2
