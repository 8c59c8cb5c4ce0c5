"""Bulk reindex: every derived view rebuilt from primary data, byte-identical to incremental ingest."""

from __future__ import annotations

import random
from pathlib import Path

from cablestore import Store
from cablestore.authoring.workload import Workload, read_posts
from cablestore.cli import main
from cablestore.rebuild.recompute import is_primary
from cablestore.rebuild.reindex import reindex

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


def test_bulk_heads_from_the_post_and_linker_keys_equal_the_heads_ingest_settled(tmp_path):
    """``links.bulk_latest`` (what a reindex uses) against the heads incremental ingest wrote."""
    from cablestore.views import links

    bufs = read_posts(FIXTURE) + WORKLOAD[:1500]
    _ingest(tmp_path / "s", bufs)
    with Store(tmp_path / "s") as s:
        heads = [(k, v) for k, v in s.items(links.PREFIX)]
        assert len(heads) > 3
        posts, linkers = dict(s.items(b"!post!")), [k for k, _ in s.items(b"!rev!")]
        assert sorted(links.bulk_latest(iter(posts), iter(linkers), posts.get)) == heads  # yielded in hash order
        some = next(k for k, _ in heads)[-32:]  # a post the caller did not index has no head
        assert sorted(links.bulk_latest(iter(posts), iter(linkers), posts.get, {some})) == [h for h in heads if h[0][-32:] != some]


def test_bulk_heads_of_hand_made_posts_and_linkers(alice):
    """A post linked by another, one linked by nothing, a linker of an unknown hash, a non-linkable post, a damaged post."""
    from cablestore.keyspace.records import Indexed
    from cablestore.views import links
    from cablestore.wire.codec import INFO, TEXT

    from .conftest import post

    unknown = bytes(32)
    first = post(alice, TEXT, NOW, channel="Dev", text="a")
    second = post(alice, TEXT, NOW + 1, links=[Indexed.of(first).hash], channel="dev", text="b")
    third = post(alice, TEXT, NOW + 2, links=[unknown], channel="other", text="c")
    info = post(alice, INFO, NOW + 3, info=[("name", "al")])
    ips = [Indexed.of(b) for b in (first, second, third, info)]
    posts = dict(sorted((b"!post!" + ip.hash, b) for ip, b in zip(ips, (first, second, third, info), strict=True)))
    posts[b"!post!" + b"\xff" * 32] = first[:40]  # damaged: no head, no error
    linkers = sorted(k for ip in ips for k, _ in links.entries(ip))
    got = sorted(links.bulk_latest(iter(posts), iter(linkers), posts.get))
    expected = sorted(e for ip in ips[1:3] for e in links.latest(ip.hash, ip))
    assert got == expected and len(got) == 2  # `first` is linked, `info` is not linkable
    assert not list(links.bulk_latest([], iter(linkers), posts.get))


def test_reindex_drops_stray_keys_in_every_gap_between_primary_ranges(tmp_path):
    before = _ingest(tmp_path / "s", WORKLOAD[:300])
    strays = [b"!", b"!aaa", b"!deleted\xff", b"!m", b"!pos", b"!post\xff", b"!r", b"zzz", b"\xff\xff"]
    kept = [b"!local!x", b"!quarantine!!post!" + bytes(32)]
    with Store(tmp_path / "s") as s:
        with s.db.write_batch() as wb:
            for key in strays + kept:
                wb.put(key, b"v")
        report = reindex(s)
        after = dump(s)
    assert report.dropped == sum(1 for k, _ in before if not is_primary(k)) + len(strays)
    assert sorted(after) == sorted(before + [(k, b"v") for k in kept])


def test_reindex_leaves_garbage_collection_as_it_found_it(tmp_path):
    import gc

    _ingest(tmp_path / "s", WORKLOAD[:50])
    with Store(tmp_path / "s") as s:
        assert gc.isenabled()
        reindex(s)
        assert gc.isenabled()
        gc.disable()
        try:
            reindex(s)
            assert not gc.isenabled()
        finally:
            gc.enable()


def test_candidates_carry_a_blob_only_where_latest_can_use_the_post(alice):
    """A linker's candidate in its target's links group needs no bytes: a linker is never a head."""
    from cablestore.keyspace.records import Indexed
    from cablestore.rebuild.recompute import recompute_post, render
    from cablestore.wire.codec import TEXT, decode_post

    from .conftest import post

    first = post(alice, TEXT, NOW, channel="dev", text="a")
    target = Indexed.of(first).hash
    second = post(alice, TEXT, NOW + 1, links=[target], channel="dev", text="b")
    h = Indexed.of(second).hash
    _, candidates = recompute_post(h, second, decode_post(second), ())
    by_group = dict(candidates)
    assert by_group[("links", target)] == (h, h, None)  # ranked by the linker's hash
    assert by_group[("links", h)] == (b"", h, second)
    assert render("links", target, by_group[("links", target)]) == []
    assert render("links", h, by_group[("links", h)]) == [(b"!links!hdev\x00\x01" + h, b"")]
    assert all(blob == second for (view, _), (_, _, blob) in candidates if view != "links")


def test_reindex_in_many_batches_on_its_writer_thread_is_byte_identical(tmp_path, monkeypatch):
    """Small batches: many writes in flight on the writer thread, in order, deletes before puts; the thread ends with the reindex."""
    import threading

    from cablestore.rebuild import reindex as reindex_mod

    before = _ingest(tmp_path / "s", WORKLOAD)
    _damage(tmp_path / "s")
    monkeypatch.setattr(reindex_mod, "_BATCH_KEYS", 257)
    with Store(tmp_path / "s") as s:
        report = reindex(s)
        assert dump(s) == before and s.check().consistent
    assert report.dropped > 6 * 257 and report.written > 30 * 257  # many batches in flight
    assert not [t for t in threading.enumerate() if t.name.startswith("cablestore-reindex-write")]


def test_tombstones_checked_in_the_posts_pass_give_the_faults_the_rebuild_gives(tmp_path):
    """Each tombstone is checked against its post/delete when the posts pass reads it (or by a point read when
    its target comes first in key order): forged records on both sides of their delete, and on a target the store
    never held, are each one fault, as the rebuild's check (which checks every record first) reports them."""
    from cablestore.keyspace.records import Tombstone

    before = _ingest(tmp_path / "s", WORKLOAD[:800])
    with Store(tmp_path / "s", now=lambda: NOW) as s:
        real = next(
            Tombstone.unpack(k[9:41], k[41:], v) for k, v in before if k.startswith(b"!deleted!") and s.get(k[41:]) is not None
        )
        stored = [(k[6:], v) for k, v in before if k.startswith(b"!post!") and k[6:] != real.by]
        below = next((h, blob) for h, blob in stored if h < real.by)
        above = next((h, blob) for h, blob in reversed(stored) if h > real.by)
        forged = [Tombstone(h, real.by, blob[:32]) for h, blob in (below, above)]  # "deleted by its author": the delete says not
        # A target never held, which the delete never named: were it believed, the delete would be listed in "elsewhere".
        forged.append(Tombstone(b"\x03" * 32, real.by, real.deleter, real.deleter, 0, 1, ("elsewhere",)))
        keys = []
        for tomb in forged:
            keys.append(b"!deleted!" + tomb.target + tomb.by)
            s.db.put(keys[-1], tomb.pack())
        report = reindex(s)
        assert sorted((f.kind, f.key) for f in report.faults) == sorted(("bad_tombstone", k) for k in keys)
        check = s.check()
        assert sorted((f.kind, f.key) for f in check.faults) == sorted((f.kind, f.key) for f in report.faults)
        assert not (check.missing or check.extra or check.different)  # both posts indexed, the delete listed as before
        assert not [k for k, _ in s.items(b"!chat!") if b"elsewhere" in k]
        assert s.get(below[0]) == below[1] and s.get(above[0]) == above[1]


def test_reindex_lists_its_faults_in_the_order_check_lists_them(tmp_path):
    """By kind, then hash, whichever phase found them (a damaged tombstone is found before the posts pass,
    a damaged post during it): the report does not show the order the checks ran in."""
    before = _ingest(tmp_path / "s", WORKLOAD[:300])
    with Store(tmp_path / "s") as s:
        low = min(k for k, _ in before if k.startswith(b"!post!"))
        s.db.put(low, b"not a post")  # found in the posts pass
        s.db.put(b"!deleted!" + b"\xff" * 32 + b"\xee" * 32, b"\xc1")  # found first, when the tombstones are read
        report = reindex(s)
        assert [f.kind for f in report.faults] == ["bad_hash", "bad_tombstone"]
        assert [f.hash for f in report.faults] == [low[6:], b"\xff" * 32]
        assert [(f.kind, f.hash) for f in s.check().faults] == [(f.kind, f.hash) for f in report.faults]
