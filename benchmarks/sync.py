"""Sync benchmark: an empty store pulls N posts from `cablestore serve` over loopback TCP.

    python -m benchmarks.sync --posts 100000

Reported next to verified ingest of the same posts in the same run (machines
here are shared and noisy, so the ratio is the figure to compare; the goal is
>= 0.8), plus the latency of a channel time range request (limit 50) answered
through the codec: encode the request, the peer decodes, queries, encodes
the hash responses, the requester decodes them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cablestore import Store
from cablestore.authoring.workload import Workload, read_posts, write_posts
from cablestore.peer import Node, run_sync
from cablestore.wire import decoding as D
from cablestore.wire import messages as M


def _posts(out: Path, n: int, seed: int) -> Path:
    path = out / f"posts-{n}-seed{seed}.bin"
    if not path.exists():
        write_posts(path, Workload(seed, n))
    return path


def _ingest(path: Path, bufs, verify: bool, batch: int = 1000) -> float:
    with Store(path, verify_signatures=verify) as store:
        start = time.perf_counter()
        for i in range(0, len(bufs), batch):
            store.ingest_many(bufs[i : i + batch])
        return time.perf_counter() - start


def _serve(store: Path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "cablestore", "serve", str(store), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"serve did not start: {line!r}")
    return proc, line.split()[-1]


def sync_rate(work: Path, posts_file: Path) -> dict:
    bufs = read_posts(posts_file)
    full = work / "full"
    _ingest(full, bufs, verify=False)
    ingest_s = _ingest(work / "verified", bufs, verify=True)
    proc, address = _serve(full)
    try:
        with Store(work / "synced") as store:
            start = time.perf_counter()
            summary = asyncio.run(run_sync(store, address, timeout=3600))
            sync_s = time.perf_counter() - start
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    ingested = summary["posts_ingested"]
    with Store(work / "verified", create=False) as v:
        reachable = sum(1 for _ in v.items(b"!post!"))
    ingest_rate = len(bufs) / ingest_s
    return {
        "posts": len(bufs),
        "stored_on_source": reachable,
        "synced_posts": ingested,
        "sync_seconds": round(sync_s, 2),
        "sync_posts_per_s": round(ingested / sync_s),
        "verified_ingest_posts_per_s": round(ingest_rate),
        "ratio": round(ingested / sync_s / ingest_rate, 3),
        "complete": summary["complete"],
    }


def time_range_latency(work: Path, requests: int = 2000, seed: int = 5) -> dict:
    rng = random.Random(seed)
    with Store(work / "full", create=False) as store:
        channels = store.channel_list()
        conn = Node(store).connect("bench")
        decoder = D.Decoder()
        samples = []
        for i in range(requests):
            channel = rng.choice(channels)
            end = rng.choice([0, 1_700_000_000_000 + rng.randrange(0, 400_000_000)])
            req = M.TimeRangeRequest(i.to_bytes(4, "big"), channel, 0, end, 50)
            start = time.perf_counter()
            conn.receive_data(M.encode(req), 0)
            answers = decoder.feed(conn.data_to_send())
            samples.append(time.perf_counter() - start)
            assert answers and all(isinstance(a, M.HashResponse) for a in answers)
            if end == 0:  # live: cancel it so the table stays small
                conn.receive_data(M.encode(M.CancelRequest((0x80000000 | i).to_bytes(4, "big"), cancel_id=req.req_id)), 0)
    samples.sort()
    return {
        "requests": requests,
        "p50_ms": round(statistics.median(samples) * 1000, 3),
        "p99_ms": round(samples[int(len(samples) * 0.99)] * 1000, 3),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--posts", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="bench-results", help="where generated posts are cached and results written")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    posts_file = _posts(out, args.posts, args.seed)
    work = Path(tempfile.mkdtemp(prefix="cablestore-sync-"))
    try:
        result = {"sync": sync_rate(work, posts_file), "time_range_limit_50": time_range_latency(work)}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (out / f"sync-{args.posts}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
