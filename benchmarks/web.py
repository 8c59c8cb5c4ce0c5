"""How fast the web archive answers, at a store's size: channel pages above all (issue 37: p99 <= 100 ms at 1M posts).

    python -m benchmarks.web --posts 1000000 --requests 2000 --store /tmp/web-1m.ldb

Builds the store from the deterministic workload (``cablestore.authoring.workload``, trusted
ingest) unless ``--store`` already holds one, opens it read-only as ``cablestore web`` does,
serves it on a free port of 127.0.0.1 (``cablestore.web.WebThread``: aiohttp, Jinja2, the
store read in the archive's thread pool) and asks over one keep-alive HTTP connection, one
request at a time: channel pages (the newest page of a random channel, and a page from a
random point of its history, each of 50 messages), a post's page, and the small pages once
each.  Each time is the whole request seen by the client: routing, the store's reads, the
template, the socket.  Prints percentiles per kind of page.
"""

from __future__ import annotations

import argparse
import http.client
import random
import statistics
import time
from pathlib import Path
from urllib.parse import quote

from cablestore import Store
from cablestore.authoring.workload import Workload
from cablestore.web.server import WebThread

NOW = 1_900_000_000_000


def build(path: Path, posts: int, seed: int) -> None:
    with Store(path, verify_signatures=False, now=lambda: NOW) as store:
        batch: list[bytes] = []
        done = 0
        for buf in Workload(seed, posts):
            batch.append(buf)
            if len(batch) == 5000:
                store.ingest_many(batch)
                done += len(batch)
                batch = []
                if done % 100_000 == 0:
                    print(f"  built {done:,} posts", flush=True)
        store.ingest_many(batch)


def timed(conn: http.client.HTTPConnection, path: str) -> float:
    start = time.perf_counter()
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read()
    took = time.perf_counter() - start
    if r.status != 200:
        raise SystemExit(f"{path}: {r.status} {body[:200]!r}")
    return took


def percentiles(times: list[float]) -> str:
    ms = sorted(t * 1000 for t in times)
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return f"n={len(ms)} p50 {q[49]:.1f} ms, p90 {q[89]:.1f} ms, p99 {q[98]:.1f} ms, max {ms[-1]:.1f} ms"


def measure(store: Store, base_port: int, requests: int, seed: int) -> dict[str, list[float]]:
    rng = random.Random(seed)
    channels = store.channel_list()
    url = {c: "/channel/" + quote(c, safe="") for c in channels}
    spans = {}
    for c in channels:  # newest and oldest timestamp of each channel's messages
        hashes = store.channel_time_range(c)
        spans[c] = (store.post(hashes[0]).timestamp, store.post(hashes[-1]).timestamp)
    conn = http.client.HTTPConnection("127.0.0.1", base_port, timeout=60)
    out: dict[str, list[float]] = {"channel, newest page": [], "channel, a page of its history": [], "post": []}
    for name in ("/", "/users", "/moderation", "/status"):
        out[name] = [timed(conn, name)]
    for _ in range(requests // 10):  # warm the block cache and the code paths, not counted
        timed(conn, url[rng.choice(channels)])
    for i in range(requests):
        c = rng.choice(channels)
        if i % 2:
            newest, oldest = spans[c]
            cut = rng.randint(oldest, newest)
            out["channel, a page of its history"].append(timed(conn, f"{url[c]}?before={cut}-{'f' * 64}"))
        else:
            out["channel, newest page"].append(timed(conn, url[c]))
        if i % 10 == 0:
            h = store.channel_time_range(c, limit=1)[0].hex()
            out["post"].append(timed(conn, f"/post/{h}"))
    conn.close()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.web", description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=1_000_000, help="posts of the workload (default: 1,000,000)")
    parser.add_argument("--requests", type=int, default=2000, help="channel page requests (default: 2000)")
    parser.add_argument("--store", type=Path, required=True, help="the store: built here unless it exists")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if not (args.store / "CURRENT").exists():
        start = time.perf_counter()
        print(f"building {args.posts:,} posts in {args.store} ...", flush=True)
        build(args.store, args.posts, args.seed)
        print(f"built in {time.perf_counter() - start:.0f} s", flush=True)
    store = Store(args.store, readonly=True)
    web = WebThread(store, "127.0.0.1", 0)
    try:
        port = web.start()
        stats = store.stats()
        print(f"store: {stats.posts:,} posts, {stats.channels} channels, {stats.users} users, {stats.bytes_on_disk / 1e6:.0f} MB")
        for kind, times in measure(store, port, args.requests, args.seed).items():
            print(f"{kind:32} " + (percentiles(times) if len(times) > 1 else f"{times[0] * 1000:.1f} ms (once)"))
    finally:
        web.stop()
        store.close()


if __name__ == "__main__":
    main()
