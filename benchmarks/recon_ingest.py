"""What the range sums (``views/recon.py``) cost ingest and disk: the same posts ingested with and without them, in one run.

    python -m benchmarks.recon_ingest --posts 20000 --rounds 3

Each ingest runs in a fresh process; "without" turns the view's two hooks
(``views.recon.add`` and the batch's ``_write_sums``) into no-ops, so
everything else is the same code.  Rounds alternate with and without, so
a noisy machine slows both alike; the ratio is of the medians.  Reported:
posts/s and CPU µs a post for batches of 1,000 (``ingest_many``) and of 1
(a post a WriteBatch: the view's read-modify-write at its dearest), the
``!recon`` rows and their bytes, and the store's size on disk.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from cablestore import Store
from cablestore.authoring.workload import Workload, iter_posts, write_posts
from cablestore.keyspace.keys import RECON

NOW = 1_900_000_000_000


def _child(path: str, posts_file: str, batch: int, with_sums: bool, verify: bool, conn) -> None:
    if not with_sums:
        from cablestore.store.write import batch as batch_module
        from cablestore.views import recon

        recon.add = lambda *a, **k: None
        batch_module.IndexState._write_sums = lambda self: None
    with Store(path, verify_signatures=verify, now=lambda: NOW) as store:
        start, cpu = time.perf_counter(), time.process_time()
        done = 0
        for posts in iter_posts(Path(posts_file), batch):
            done += len(store.ingest_many(posts))
        seconds, cpu_s = time.perf_counter() - start, time.process_time() - cpu
        rows = [(k, v) for k, v in store.db.iterator(prefix=RECON)]
    size = sum(f.stat().st_size for f in Path(path).iterdir())
    conn.send({"posts_per_s": done / seconds, "cpu_us": cpu_s * 1e6 / done, "rows": len(rows), "row_bytes": sum(len(k) + len(v) for k, v in rows), "disk": size})


def ingest(path: Path, posts_file: Path, batch: int, with_sums: bool, verify: bool) -> dict:
    shutil.rmtree(path, ignore_errors=True)
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_child, args=(str(path), str(posts_file), batch, with_sums, verify, child))
    proc.start()
    child.close()
    out = parent.recv()
    proc.join()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--single", type=int, default=2000, help="posts ingested one a batch (0: skip)")
    parser.add_argument("--verify", action="store_true", help="check signatures too (the ratio is then closer to 1)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="recon-ingest-"))
    try:
        results = {}
        for label, n, batch in (("batch 1000", args.posts, 1000), ("batch 1", args.single, 1)):
            if not n:
                continue
            posts_file = work / f"posts-{n}.bin"
            if not posts_file.exists():
                write_posts(posts_file, Workload(args.seed, n))
            runs: dict[bool, list] = {True: [], False: []}
            for _ in range(args.rounds):
                for with_sums in (False, True):
                    runs[with_sums].append(ingest(work / "store", posts_file, batch, with_sums, args.verify))
            med = {w: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for w, rs in runs.items()}
            results[label] = {
                "posts": n,
                "with": med[True],
                "without": med[False],
                "ratio_posts_per_s": med[True]["posts_per_s"] / med[False]["posts_per_s"],
                "all_with": [r["posts_per_s"] for r in runs[True]],
                "all_without": [r["posts_per_s"] for r in runs[False]],
                "cpu_with": [r["cpu_us"] for r in runs[True]],
                "cpu_without": [r["cpu_us"] for r in runs[False]],
            }
            r = results[label]
            print(
                f"{label}, {n:,} posts: {r['with']['posts_per_s']:,.0f}/s with, {r['without']['posts_per_s']:,.0f}/s without "
                f"({r['ratio_posts_per_s']:.3f}x); CPU {r['with']['cpu_us']:.0f} vs {r['without']['cpu_us']:.0f} µs a post; "
                f"{r['with']['rows']:,} !recon rows, {r['with']['row_bytes']:,} bytes; disk {r['with']['disk']:,} vs {r['without']['disk']:,} bytes",
                flush=True,
            )
        print(json.dumps(results, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
