"""Sync with set reconciliation against native requests, over loopback TCP: bytes, round trips, time, CPU.

    python -m benchmarks.reconcile --posts 100000,1000000

For each size the deterministic workload is split: a set D of post/texts
(10 % of the posts, at random times) and the rest, ingested once (trusted)
into a base store.  Each row builds two stores from copies of the base: A
lacks ``a_lacks`` posts of D, B lacks ``b_lacks`` others (k differences,
half on each side; and a row where B alone lacks 1,000).  Then, for each
mode, ``cablestore serve A --no-pull`` (``--no-reconcile`` for native) and
an in-process ``sync`` of a fresh copy of B through a byte-counting proxy
(:mod:`benchmarks.wirecount`): a first contact (no cursor).  Per row and
mode: bytes each way, round trips on the wire and of the reconciliation,
its bytes, wall time, each side's CPU, whether B received every post it
lacked, and for reconciliation the goal of docs/reconcile.md: the whole
sync's bytes against 1.5 x the missing posts' bytes + 64 KB.  Only post/texts
differ: a missing join, role or delete changes what a store makes of other
posts, so two such stores are not the same function of their posts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cablestore import Store, post_hash
from cablestore.authoring.workload import read_posts
from cablestore.peer import PeerLimits, run_sync
from cablestore.peer.limits import STORE_CACHE_MB
from cablestore.wire.codec import TEXT, decode_post

from .sync import _cpu_seconds, _posts, _proxy

NATIVE = PeerLimits(reconcile=0)


def _build(base: Path, target: Path, extra: list[bytes]) -> None:
    shutil.copytree(base, target)
    with Store(target, verify_signatures=False) as store:
        for i in range(0, len(extra), 1000):
            store.ingest_many(extra[i : i + 1000])


def _serve(store: Path, native: bool):
    proc = subprocess.Popen(
        [sys.executable, "-m", "cablestore", "serve", str(store), "--listen", "127.0.0.1:0", "--no-pull", "--quiet", "--port-file", str(store) + ".port"]
        + (["--no-reconcile"] if native else []),
        stdout=subprocess.DEVNULL,
    )
    port_file = Path(str(store) + ".port")
    for _ in range(600):
        if port_file.exists() and port_file.read_text().strip():
            return proc, f"127.0.0.1:{port_file.read_text().strip()}"
        if proc.poll() is not None:
            raise SystemExit("serve did not start")
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("serve did not start within 30 s")


def _one(a: Path, b: Path, work: Path, native: bool, b_lacks: list[bytes]) -> dict:
    """One sync of a copy of B from ``serve A``; ``b_lacks``: the posts B lacks that A holds (all must arrive)."""
    target = work / ("b-native" if native else "b-reconcile")
    shutil.copytree(b, target)
    proc, address = _serve(a, native)
    px, via = _proxy(address)
    try:
        served = _cpu_seconds(proc.pid)
        with Store(target, cache_mb=STORE_CACHE_MB) as store:
            cpu, start = time.process_time(), time.perf_counter()
            summary = asyncio.run(run_sync(store, via, timeout=3600, policy=NATIVE if native else PeerLimits(), signals=False))
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            arrived = sum(1 for buf in b_lacks if post_hash(buf) in store)
        served = _cpu_seconds(proc.pid) - served
        wire = json.loads(px.stdout.readline())  # once both sides closed
    finally:
        px.kill()
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(target, ignore_errors=True)
    missing_bytes = sum(len(buf) for buf in b_lacks)
    total = wire["up"] + wire["down"]
    return {
        "mode": "native" if native else "reconcile",
        "bytes_up": wire["up"], "bytes_down": wire["down"], "round_trips": wire["round_trips"],
        "reconcile_round_trips": summary["reconcile_round_trips"], "reconcile_bytes": summary["reconcile_bytes"],
        "channels_reconciled": summary["channels_reconciled"], "fallbacks": len(summary["reconcile_fallbacks"]),
        "fallback_reasons": sorted(set(summary["reconcile_fallbacks"].values()))[:5],
        "sync_s": summary["seconds"], "wall_s": round(wall, 2), "sync_cpu_s": round(cpu, 2), "serve_cpu_s": round(served, 2),
        "missing": len(b_lacks), "arrived": arrived, "complete": summary["complete"],
        "missing_bytes": missing_bytes, "goal_bytes": int(1.5 * missing_bytes + 65536), "within_goal": total <= 1.5 * missing_bytes + 65536,
    }


def run(size: int, out: Path, seed: int) -> dict:
    bufs = list(read_posts(_posts(out, size, seed)))
    texts = [i for i, buf in enumerate(bufs) if decode_post(buf).post_type == TEXT]
    rng = random.Random(seed)
    pool = rng.sample(texts, min(len(texts), max(size // 10, 2000)))
    held_back = set(pool)
    work = Path(tempfile.mkdtemp(prefix="cablestore-reconcile-", dir=out))
    rows = []
    try:
        base = work / "base"
        start = time.perf_counter()
        with Store(base, verify_signatures=False) as store:
            rest = [buf for i, buf in enumerate(bufs) if i not in held_back]
            for i in range(0, len(rest), 1000):
                store.ingest_many(rest[i : i + 1000])
        base_s = time.perf_counter() - start
        ten = size // 10
        cases = [("0", 0, 0), ("1", 0, 1), ("100", 50, 50), ("1,000", 500, 500), ("1,000 on one side", 0, 1000), (f"{ten:,} (10 %)", ten - ten // 2, ten // 2)]
        for label, a_n, b_n in cases:
            if a_n + b_n > len(pool):
                continue
            a_lacks, b_lacks = set(pool[:a_n]), set(pool[a_n : a_n + b_n])
            a, b = work / "a", work / "b"
            _build(base, a, [bufs[i] for i in pool if i not in a_lacks])
            _build(base, b, [bufs[i] for i in pool if i not in b_lacks])
            with Store(a, readonly=True) as store:  # a text deleted later, or by a blocked author, is held by neither
                held = [bufs[i] for i in sorted(b_lacks) if post_hash(bufs[i]) in store]
            for native in (True, False):
                row = {"differences": label, **_one(a, b, work, native, held)}
                rows.append(row)
                print(json.dumps({"posts": size, **row}), file=sys.stderr, flush=True)
            shutil.rmtree(a)
            shutil.rmtree(b)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"posts": size, "base_ingest_s": round(base_s, 1), "rows": rows}


def each_size(doc: str, run, name: str, argv=None) -> list[dict]:
    """The command line of a benchmark run once per size of ``--posts``: ``run(size, out, seed)`` each, the results
    written to ``OUT/NAME.json`` and printed."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--posts", default="100000", help="a comma list of sizes, e.g. 30000,100000,1000000")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="bench-results", help="where generated posts are cached and results written")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = [run(int(s), out, args.seed) for s in args.posts.split(",") if s.strip()]
    (out / f"{name}.json").write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))
    return results


def main(argv=None) -> int:
    results = each_size(__doc__, run, "reconcile", argv)
    return 0 if all(r["complete"] and r["arrived"] == r["missing"] for res in results for r in res["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
