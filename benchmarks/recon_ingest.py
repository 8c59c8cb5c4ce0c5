"""What the range sums (``views/recon.py``) cost ingest and disk: the same posts ingested with and without them, in one run.

    python -m benchmarks.recon_ingest --posts 20000 --rounds 5
    python -m benchmarks.recon_ingest --posts 5000 --rounds 0 --instructions

"Without" turns the view's two hooks (``views.recon.add`` and the batch's
``_write_sums``) into no-ops, so everything else is the same code.

Timed: each round opens two fresh stores in one process, one with the sums
and one without, and offers them the same batches in turn (the order
flipped every batch), timing each ``ingest_many``.  Interleaving batch by
batch puts both under the same load of a shared machine, whose speed here
changes by ±35 % within seconds: a ratio of whole runs in separate
processes says little below that.  Reported: posts/s of each (all rounds
added up), the ratio, the lowest, median and highest round's ratio, and
the median of every batch's pair (with and without back to back: robust to
the one batch a garbage collection or a LevelDB compaction lands on);
for batches of 1,000 (``ingest_many``) and of 1 (a post a WriteBatch: the
view's read-modify-write at its dearest); the ``!recon`` rows, their bytes
and each store's size on disk.

``--instructions``: the machine's noise taken out.  Each way runs once in a
child process under ``valgrind --tool=callgrind`` (when valgrind is on the
PATH), which counts every instruction of every thread; a child that ingests
nothing is counted too and taken off both.  The ratio of instructions is
the ratio of CPU work, not of time (it ignores caches and the disk).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cablestore import Store
from cablestore.authoring.workload import Workload, iter_posts, write_posts
from cablestore.keyspace.keys import RECON
from cablestore.store.write import batch as batch_module
from cablestore.views import recon

NOW = 1_900_000_000_000
_ADD, _WRITE_SUMS = recon.add, batch_module.IndexState._write_sums


def _no_add(*args, **kwargs) -> None:
    return None


def _no_write_sums(self) -> None:
    return None


def with_sums(on: bool) -> None:
    """Turn the view's hooks on (the store as shipped) or into no-ops."""
    recon.add = _ADD if on else _no_add
    batch_module.IndexState._write_sums = _WRITE_SUMS if on else _no_write_sums


def _disk(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir())


def interleaved(work: Path, batches: list[list[bytes]], verify: bool) -> dict:
    """One round: two fresh stores offered the same batches in turn; seconds and CPU of each way, rows and sizes."""
    spent = {True: 0.0, False: 0.0}
    cpu = {True: 0.0, False: 0.0}
    pairs = []  # each batch's seconds without / with: the two ran back to back
    paths = {True: work / "with", False: work / "without"}
    for path in paths.values():
        shutil.rmtree(path, ignore_errors=True)
    done = 0
    with Store(paths[True], verify_signatures=verify, now=lambda: NOW) as a, Store(paths[False], verify_signatures=verify, now=lambda: NOW) as b:
        stores = {True: a, False: b}
        try:
            for i, posts in enumerate(batches):
                took = {}
                for way in (True, False) if i % 2 == 0 else (False, True):
                    with_sums(way)
                    start, c = time.perf_counter(), time.process_time()
                    stored = stores[way].ingest_many(posts)
                    took[way] = time.perf_counter() - start
                    spent[way] += took[way]
                    cpu[way] += time.process_time() - c
                    done += len(stored) if way else 0
                pairs.append(took[False] / took[True])
        finally:
            with_sums(True)
        rows = list(a.db.iterator(prefix=RECON))
    return {
        "posts": done, "seconds": spent, "cpu": cpu, "pairs": pairs, "rows": len(rows),
        "row_bytes": sum(len(k) + len(v) for k, v in rows), "disk": {way: _disk(p) for way, p in paths.items()},
    }


def timed(work: Path, posts_file: Path, batch: int, rounds: int, verify: bool) -> dict:
    """``rounds`` interleaved rounds of one batch size, summed."""
    batches = list(iter_posts(posts_file, batch))
    runs = [interleaved(work, batches, verify) for _ in range(rounds)]
    posts = sum(r["posts"] for r in runs)
    seconds = {way: sum(r["seconds"][way] for r in runs) for way in (True, False)}
    cpu = {way: sum(r["cpu"][way] for r in runs) for way in (True, False)}
    per_round = sorted(r["seconds"][False] / r["seconds"][True] for r in runs)
    last = runs[-1]
    return {
        "posts": posts // rounds, "rounds": rounds,
        "with_posts_per_s": posts / seconds[True], "without_posts_per_s": posts / seconds[False],
        "ratio": seconds[False] / seconds[True],
        "round_ratios": {"min": per_round[0], "median": statistics.median(per_round), "max": per_round[-1]},
        # Robust to the one batch a collection or a compaction lands on: the median of each batch's back-to-back pair.
        "batch_pair_median": statistics.median(x for r in runs for x in r["pairs"]),
        "cpu_us_with": cpu[True] * 1e6 / posts, "cpu_us_without": cpu[False] * 1e6 / posts,
        "rows": last["rows"], "row_bytes": last["row_bytes"], "disk_with": last["disk"][True], "disk_without": last["disk"][False],
    }


def _child(way: str, posts_file: str, batch: int, count: int, verify: bool) -> None:
    """Ingest ``count`` batches one way (``with`` or ``without``) into a fresh store: what valgrind counts."""
    with_sums(way == "with")
    work = Path(tempfile.mkdtemp(prefix="recon-ingest-child-"))
    try:
        with Store(work / "store", verify_signatures=verify, now=lambda: NOW) as store:
            for i, posts in enumerate(iter_posts(Path(posts_file), batch)):
                if i >= count:
                    break
                store.ingest_many(posts)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def instructions(posts_file: Path, batch: int, posts: int, verify: bool) -> dict | None:
    """Instructions a post, each way, under callgrind (None: no valgrind here)."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    counts = {}
    for way, count in (("base", 0), ("with", posts // batch), ("without", posts // batch)):
        argv = [sys.executable, "-m", "benchmarks.recon_ingest", "--child", "with" if way == "base" else way,
                "--posts-file", str(posts_file), "--batch", str(batch), "--count", str(count)] + (["--verify"] if verify else [])
        with tempfile.TemporaryDirectory() as out:
            proc = subprocess.run([valgrind, "--tool=callgrind", f"--callgrind-out-file={out}/cg.out", *argv],
                                  capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"}, check=True)
        counts[way] = int(re.search(r"Collected : (\d+)", proc.stderr).group(1))
    n = (posts // batch) * batch
    per = {way: (counts[way] - counts["base"]) / n for way in ("with", "without")}
    return {"posts": n, "batch": batch, "per_post_with": per["with"], "per_post_without": per["without"], "ratio": per["without"] / per["with"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of each batch size (0: none)")
    parser.add_argument("--single", type=int, default=2000, help="posts ingested one a batch (0: skip)")
    parser.add_argument("--verify", action="store_true", help="check signatures too (the ratio is then closer to 1)")
    parser.add_argument("--instructions", action="store_true", help="also count instructions each way under valgrind")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--child", choices=("with", "without"), help=argparse.SUPPRESS)
    parser.add_argument("--posts-file", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=1000, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.posts_file, args.batch, args.count, args.verify)
        return 0
    work = Path(tempfile.mkdtemp(prefix="recon-ingest-"))
    try:
        results: dict = {}
        for label, n, batch in (("batch 1000", args.posts, 1000), ("batch 1", args.single, 1)):
            if not n:
                continue
            posts_file = work / f"posts-{n}.bin"
            if not posts_file.exists():
                write_posts(posts_file, Workload(args.seed, n))
            if args.rounds:
                r = results[label] = timed(work, posts_file, batch, args.rounds, args.verify)
                q = r["round_ratios"]
                print(
                    f"{label}, {n:,} posts x {args.rounds} rounds: {r['with_posts_per_s']:,.0f}/s with, {r['without_posts_per_s']:,.0f}/s without "
                    f"({r['ratio']:.3f}x; rounds {q['min']:.3f}-{q['median']:.3f}-{q['max']:.3f}; median batch pair {r['batch_pair_median']:.3f}x); "
                    f"CPU {r['cpu_us_with']:.1f} vs {r['cpu_us_without']:.1f} µs a post; "
                    f"{r['rows']:,} !recon rows, {r['row_bytes']:,} bytes; disk {r['disk_with']:,} vs {r['disk_without']:,} bytes",
                    flush=True,
                )
            if args.instructions:
                counted = instructions(posts_file, batch, n, args.verify)
                if counted is None:
                    print("valgrind is not on the PATH: no instruction counts", flush=True)
                    break
                results[f"{label} instructions"] = counted
                print(f"{label}, {counted['posts']:,} posts under callgrind: {counted['per_post_with']:,.0f} instructions a post with, "
                      f"{counted['per_post_without']:,.0f} without ({counted['ratio']:.3f}x)", flush=True)
        print(json.dumps(results, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
