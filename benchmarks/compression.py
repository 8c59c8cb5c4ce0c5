"""LevelDB's compression and block size in the real store: trusted ingest of N posts, flatness and disk.

    python -m benchmarks.compression --posts 1000000

For each setting (Snappy with the store's 32 KB blocks, as shipped; no
compression with 32 KB blocks; no compression with LevelDB's 4 KB), a fresh
process ingests the same posts trusted in batches of 1,000
(:func:`benchmarks.run.timed_ingest`'s child, with the setting applied to
:mod:`cablestore.store.lifecycle.opening` before the store opens), then
compacts the store: posts/s, the rate of the last 5 % over the first 5 %,
CPU µs a post (the whole process, LevelDB's threads included; and in the
first and last 5 %, also of the indexing thread alone), and the
store's size on disk after compaction against the raw post bytes.  Settings
alternate across rounds; the machine is shared, so compare the ratios of one
run.  A setting changes only tables written after it: a store written with
another opens and reads as before.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks import run as R
from cablestore import Store
from cablestore.authoring.workload import Workload, write_posts

SETTINGS = {
    "snappy-32k": ("snappy", 32 << 10),
    "none-32k": (None, 32 << 10),
    "none-4k": (None, 4 << 10),
}


def _child(setting, path, posts_file, n, conn):
    from cablestore.store.lifecycle import opening

    opening.COMPRESSION, opening.BLOCK_SIZE = SETTINGS[setting]
    R._ingest_child(path, posts_file, n, False, 1000, 0, conn)


def _compact_and_measure(setting: str, path: str, conn) -> None:
    from cablestore.store.lifecycle import opening

    opening.COMPRESSION, opening.BLOCK_SIZE = SETTINGS[setting]
    with Store(path) as store:
        store.db.compact_range()
    conn.send(sum(f.stat().st_size for f in Path(path).iterdir() if f.is_file()))


def _in_child(target, *args):
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=target, args=(*args, child))
    proc.start()
    child.close()
    try:
        return parent.recv()
    finally:
        parent.close()
        proc.join()


def measure(setting: str, work: Path, posts_file: Path, n: int, raw: int) -> dict:
    path = str(work / setting)
    shutil.rmtree(path, ignore_errors=True)
    seconds, rss, anon, curve, cpu_us, _main = _in_child(_child, setting, path, str(posts_file), n)
    disk = _in_child(_compact_and_measure, setting, path)
    shutil.rmtree(path, ignore_errors=True)
    return {
        "setting": setting, "posts_per_s": round(n / seconds), "seconds": round(seconds, 1),
        "last_over_first": round(curve[-1][1] / curve[0][1], 3) if len(curve) >= 2 else None,
        "cpu_us_per_post": round(cpu_us, 1),
        # CPU µs a post in the first and the last 5 %: the whole process (LevelDB's compactions included) and the indexing thread
        "process_cpu_first_last": [round(curve[0][3], 1), round(curve[-1][3], 1)],
        "indexing_cpu_first_last": [round(curve[0][4], 1), round(curve[-1][4], 1)], "disk_mb": round(disk / 2**20, 1), "disk_over_raw": round(disk / raw, 3),
        "peak_anon_mb": round(anon), "load_average": round(os.getloadavg()[0], 1),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--posts", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--settings", default=",".join(SETTINGS), help=f"a comma list of {', '.join(SETTINGS)}")
    p.add_argument("--out", default="bench-results", help="where the posts file is cached and results written")
    args = p.parse_args(argv)
    settings = [s for s in args.settings.split(",") if s]
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        p.error(f"unknown settings: {', '.join(unknown)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    posts_file = out / f"posts-{args.posts}-seed1.bin"
    if not posts_file.exists():
        write_posts(posts_file, Workload(1, args.posts))
    raw = sum(len(b) for batch in R.iter_posts(posts_file, 10_000) for b in batch)
    work = Path(tempfile.mkdtemp(prefix="cablestore-compression-", dir=args.out))
    rows = []
    try:
        for _ in range(args.rounds):
            for setting in settings:
                rows.append(measure(setting, work, posts_file, args.posts, raw))
                print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {"posts": args.posts, "raw_mb": round(raw / 2**20, 1), "rows": rows}
    (out / f"compression-{args.posts}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
