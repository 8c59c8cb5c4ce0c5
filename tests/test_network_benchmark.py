"""The network simulation at its smallest: four `serve` processes in a line, one SIGKILL, one partition healed;
every store ends with the same digest, moderation included, and the report has every field."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.netwire import edges_of, partition
from benchmarks.network import FIELDS, main

POSTS = 4


def _serving_benchmark_stores() -> list[str]:
    """Command lines of live `serve` processes on the benchmark's stores (its temporary directories)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"serve" in argv and any(b"cablestore-net-" in a for a in argv):
                found.append(b" ".join(argv).decode(errors="replace"))
    return found


def test_four_peers_in_a_line_converge_through_churn_and_a_partition(capsys):
    before = set(_serving_benchmark_stores())
    assert main(["--peers", "4", "--topologies", "line", "--posts", str(POSTS), "--churn", "1", "--down", "1", "--apart", "1",
                 "--timeout", "40", "--seed", "1", "--json", "--quiet"]) == 0  # seed 1: a refused post once ended a live pull
    out = capsys.readouterr()
    assert out.err == ""  # --quiet: no progress
    (report,) = json.loads(out.out)["reports"]
    assert set(report) == set(FIELDS)
    assert report["peers"] == 4 and report["topology"] == "line" and report["edges"] == 3 and report["cut"] == 1 and report["kills"] == 1
    assert report["not_converged"] == []
    assert 0 < report["converge_after_last_write_s"] < 40 and 0 < report["converge_after_heal_s"] < 40
    # the admin's join, the text posts, three moderation posts, then a post and a moderation post on each side of the cut;
    # the spammer's two posts were dropped by the block everywhere
    assert report["posts_written"] == POSTS + 2 + 2 and report["moderation_written"] == 3 + 2
    assert report["posts_held"] == 1 + POSTS + 3 + 2 + 2
    held = report["moderation_held"]
    assert held["blocks"] == 1 and held["hidden_users"] == 2 and held["roles"] == 3  # the admin; alice and carol made mods
    assert len(report["digest"]) == 64
    assert report["delivered_posts"] >= 3 * (report["posts_held"] - 1)  # every other peer got every post but the shared join
    assert report["wire_bytes"] > report["delivered_posts"] * report["mean_post_bytes"] > 0
    assert report["messages_per_delivered_post"] > 0 and report["duplicate_deliveries"] >= 0
    assert len(report["peak_rss_mb"]) == 4 and all(mb > 10 for mb in report["peak_rss_mb"])
    assert set(_serving_benchmark_stores()) <= before  # every process it started is stopped


def test_the_partition_cut_separates_the_halves_of_each_topology():
    for topology in ("line", "ring", "random"):
        for n in (8, 32):
            edges = edges_of(topology, n, seed=1)
            side_a, cut, side_b = partition(n, edges)
            assert sorted(side_a + cut + side_b) == list(range(n)) and side_a and side_b and cut
            crossing = [(x, y) for x, y in edges if {x, y} & set(side_a) and {x, y} & set(side_b)]
            assert crossing == [], (topology, n, crossing)
            if topology == "random":
                degree = [sum(i in e for e in edges) for i in range(n)]
                assert degree == [3] * n and len(set(map(frozenset, edges))) == len(edges)
