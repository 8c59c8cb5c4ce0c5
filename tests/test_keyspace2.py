"""benchmarks.keyspace2 (issue 38): its baseline is the real store's rows, and it runs at a tiny size."""

from __future__ import annotations

import json

import plyvel

from benchmarks import keyspace2
from benchmarks.keyspace2_rows import DropRev, FoldCandidates, Keyspace, ShortKeys, is_own_rev, membership_parts
from benchmarks.profile import _posts_file

POSTS = 1200


def _rows(path):
    db = plyvel.DB(str(path))
    try:
        return list(db.iterator())
    finally:
        db.close()


def test_the_baseline_replay_writes_exactly_the_rows_of_a_real_store(tmp_path):
    posts_file = _posts_file(tmp_path, POSTS, 1)
    real = keyspace2.record(posts_file, tmp_path / "store", tmp_path / "stream.bin", POSTS)
    assert real["posts"] == POSTS and real["indexing_cpu_us"] > 0
    result = keyspace2.replay(Keyspace(), tmp_path / "stream.bin", tmp_path / "replay", 0, None, keep=True)
    held = _rows(tmp_path / "store")
    assert len(held) > 5 * 0.9 * POSTS  # a post and its entries: the comparison is of a real store
    assert _rows(tmp_path / "replay") == held  # key for key, value for value
    # The accounting counts every put and delete of the batches, which hold more than the final rows.
    assert result["rows_per_post"] * POSTS >= len(held) - 1
    assert result["families_per_post"]["!post!"] <= 1 and result["families_per_post"]["!rev!<hash>"] <= 1

    # A candidate writes what it says: no reverse entries, no membership candidates, no escaped names.
    for ks, gone in (
        (DropRev(), is_own_rev),
        (FoldCandidates(), lambda k: (membership_parts(k) or (0, b""))[1] == b"a"),
        (ShortKeys(), lambda k: k.startswith(b"!chat!general")),
    ):
        keyspace2.replay(ks, tmp_path / "stream.bin", tmp_path / "cand", 0, None, keep=True)
        rows = _rows(tmp_path / "cand")
        assert rows and not any(gone(k) for k, _ in rows), ks.name
        assert sum(1 for k, _ in rows if k.startswith(b"!post!")) == sum(1 for k, _ in held if k.startswith(b"!post!"))


def test_the_benchmark_runs_every_candidate_at_a_tiny_size(tmp_path, capsys):
    assert keyspace2.main(["--posts", str(POSTS), "--out", str(tmp_path), "--queries", "20"]) == 0
    sizes = json.loads((tmp_path / "keyspace2.json").read_text())
    rows = sizes[0]["candidates"]
    assert [r["name"].split(":")[0] for r in rows] == ["today", "a", "b", "c", "d", "e", "f1", "f2", "f3", "g"]
    by = {r["name"].split(":")[0]: r for r in rows}
    # The store now writes no !channel!a rows (format 2, candidate e): b's fold has none left to remove, so g ties a.
    assert by["g"]["rows_per_post"] <= by["a"]["rows_per_post"] < by["today"]["rows_per_post"]
    assert by["d"]["bytes_per_post"] < by["today"]["bytes_per_post"] == by["f1"]["bytes_per_post"]
    assert all(set(r["latency_p50_us"]) == {"chat time range", "state", "author", "rev lookup", "head check"} for r in rows)
    assert "| g: a + " in (tmp_path / "keyspace2.md").read_text()
    assert not list(tmp_path.glob("ks2-*"))  # the stream, the store and the replays are removed
    capsys.readouterr()
    assert keyspace2.main(["--table", str(tmp_path / "keyspace2.json")]) == 0  # the tables again, from the figures
    assert capsys.readouterr().out.count("\n| today |") == 1
