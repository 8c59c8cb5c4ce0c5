"""What a read-only open costs: ``Store(path, readonly=True)`` against a writable open, on one store.

    python -m benchmarks.readonly STORE --rounds 5

Each round opens the store both ways, in alternating order (a writable
open first in even rounds), and times the open, ``stats()`` (what
``cablestore stats`` computes) and the close.  A read-only open makes a
directory of links and takes a shared lock (cablestore/store/lifecycle/readonly.py);
LevelDB then writes its bookkeeping into that directory, whose size (files
LevelDB wrote, not the links) is reported too.  The writable open rewrites
the store's own bookkeeping files, as every open did before: run this on a
copy of a store you care about.  Medians of the rounds, and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from cablestore import Store


def _written(directory: Path) -> int:
    """Bytes of the files LevelDB wrote into the directory of links (the links themselves not counted)."""
    return sum(p.stat().st_size for p in directory.iterdir() if not p.is_symlink())


def one(path: Path, readonly: bool) -> dict[str, float]:
    start = time.perf_counter()
    store = Store(path, create=False, readonly=readonly)
    opened = time.perf_counter()
    try:
        posts = store.stats().posts
        counted = time.perf_counter()
        written = _written(store._links.dir) if readonly else 0
    finally:
        store.close()
    closed = time.perf_counter()
    return {"open": opened - start, "stats": counted - opened, "close": closed - counted, "total": closed - start, "posts": posts, "written": written}


def measure(path: Path, rounds: int) -> dict[str, dict[str, float]]:
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for i in range(rounds):
        for readonly in (False, True) if i % 2 == 0 else (True, False):
            runs[readonly].append(one(path, readonly))
    return {("read-only" if ro else "writable"): {k: statistics.median(r[k] for r in rs) for k in rs[0]} for ro, rs in runs.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.readonly", description=__doc__.splitlines()[0])
    parser.add_argument("store", type=Path, help="an existing store (a writable open rewrites its bookkeeping files: use a copy)")
    parser.add_argument("--rounds", type=int, default=5, help="opens each way, alternating (default: 5)")
    args = parser.parse_args(argv)
    medians = measure(args.store, args.rounds)
    ro, rw = medians["read-only"], medians["writable"]
    size = sum(f.stat().st_size for f in args.store.iterdir() if f.is_file())
    print(f"{args.store}: {int(rw['posts']):,} posts, {size / 1e6:,.0f} MB, {len(os.listdir(args.store))} files; medians of {args.rounds} rounds each way")
    print("| open | open s | stats() s | close s | total s | bytes written beside the links |")
    print("|---|---|---|---|---|---|")
    for name, m in medians.items():
        print(f"| {name} | {m['open']:.3f} | {m['stats']:.3f} | {m['close']:.3f} | {m['total']:.3f} | {int(m['written']):,} |")
    print(f"read-only / writable, total: {ro['total'] / rw['total']:.2f}; open alone: {ro['open'] / rw['open']:.2f}")


if __name__ == "__main__":
    main()
