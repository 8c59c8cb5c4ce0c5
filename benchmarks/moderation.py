"""Ingest and queries with moderation active, against the same workload without it, in one run.

    python -m benchmarks.moderation --posts 100000

Two stores get the same generated posts.  The moderated one also gets a
moderated cabal's worth of posts (admins, channel mods, hides of users and
posts, drops of posts and a channel, blocks with and without drop, an
unblock) spread through the workload, and has a local user.  Every figure
is reported as moderated / plain from the same run (the machines here are
shared and noisy); the goal is no query more than 10% slower at 100k.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from cablestore import Keypair, Store, decode_post, make_post, post_hash
from cablestore.authoring.workload import Workload
from cablestore.wire.codec import ADMIN, BLOCK, DROP_CHANNEL, DROP_POST, HIDE_POST, HIDE_USER, MOD, MODERATION, ROLE, UNBLOCK

NOW = 1_900_000_000_000
QUERIES = ("channel_time_range", "channel_state", "channel_list", "get_many", "messages", "moderation_state")


def moderation_posts(bufs: list[bytes], seed: int) -> tuple[Keypair, list[bytes]]:
    """The local user and ~40 moderation posts acting on the workload's own users, posts and channels."""
    rng = random.Random(seed)
    decoded = [(post_hash(b), decode_post(b)) for b in bufs]
    users = sorted({p.public_key for _, p in decoded})
    channels = sorted({p.channel for _, p in decoded if p.channel})
    texts = [(h, p) for h, p in decoded if p.post_type == 0]
    t0 = max(p.timestamp for _, p in decoded) + 1
    local, admin, mod = Keypair.from_seed(b"L" * 32), Keypair.from_seed(b"A" * 32), Keypair.from_seed(b"M" * 32)
    made = [
        make_post(local, ROLE, t0, reason="", privacy=0, channel="", recipients=[admin.public_key], role=ADMIN)[0],
        make_post(admin, ROLE, t0 + 1, reason="", privacy=0, channel=channels[0], recipients=[mod.public_key], role=MOD)[0],
    ]
    for i in range(12):
        h, p = rng.choice(texts)
        made.append(make_post(mod, MODERATION, t0 + 2 + i, reason="r", privacy=0, channel=p.channel, recipients=[h], action=rng.choice((HIDE_POST, DROP_POST)))[0])
    for i in range(3):
        made.append(make_post(admin, MODERATION, t0 + 20 + i, reason="", privacy=0, channel="", recipients=[rng.choice(users)], action=HIDE_USER)[0])
    made.append(make_post(admin, MODERATION, t0 + 30, reason="", privacy=0, channel=channels[-1] + "-old", recipients=[], action=DROP_CHANNEL)[0])
    blocked = rng.sample(users, 2)
    made.append(make_post(local, BLOCK, t0 + 31, reason="", privacy=0, recipients=[blocked[0]], drop=1, notify=0)[0])
    made.append(make_post(admin, BLOCK, t0 + 32, reason="", privacy=0, recipients=[blocked[1]], drop=0, notify=1)[0])
    made.append(make_post(local, UNBLOCK, t0 + 33, reason="", privacy=0, recipients=[blocked[0]], undrop=0)[0])
    return local, made


def ingest(path: Path, bufs: list[bytes], local: bytes | None, batch: int = 1000) -> float:
    start = time.perf_counter()
    with Store(path, now=lambda: NOW, local_user=local) as s:
        for i in range(0, len(bufs), batch):
            s.ingest_many(bufs[i : i + batch])
    return len(bufs) / (time.perf_counter() - start)


def latencies(path: Path, bufs: list[bytes], seed: int, calls: int) -> dict:
    rng = random.Random(seed)
    with Store(path, now=lambda: NOW) as s:
        channels = s.channel_list()
        hashes = [post_hash(b) for b in rng.sample(bufs, min(len(bufs), 8 * calls))]
        work = {
            "channel_time_range": lambda: s.channel_time_range(rng.choice(channels), limit=50),
            "channel_state": lambda: s.channel_state(rng.choice(channels)),
            "channel_list": lambda: s.channel_list(),
            "get_many": lambda: s.get_many(rng.sample(hashes, 8)),
            "messages": lambda: s.messages(rng.choice(channels), limit=50),
            "moderation_state": lambda: s.moderation_state(channels),
        }
        out = {}
        for name in QUERIES:
            times = []
            for _ in range(calls):
                t = time.perf_counter()
                work[name]()
                times.append((time.perf_counter() - t) * 1e6)
            out[name] = statistics.median(times)
    return out


def run(posts: int, seed: int = 7, calls: int = 300) -> dict:
    bufs = list(Workload(seed, posts))
    local, extra = moderation_posts(bufs, seed)
    moderated = list(bufs)
    step = max(1, len(bufs) // len(extra))
    for i, b in enumerate(extra):  # spread through the workload: state changes mid-ingest
        moderated.insert(min(len(moderated), (i + 1) * step + i), b)
    with tempfile.TemporaryDirectory(prefix="cablestore-modbench-") as tmp:
        plain_rate = ingest(Path(tmp) / "plain", bufs, None)
        mod_rate = ingest(Path(tmp) / "moderated", moderated, local.public_key)
        plain_q = latencies(Path(tmp) / "plain", bufs, seed, calls)
        mod_q = latencies(Path(tmp) / "moderated", bufs, seed, calls)
        with Store(Path(tmp) / "moderated", now=lambda: NOW) as s:
            state = s.moderation_summary()
    return {
        "posts": posts,
        "moderation_posts": len(extra),
        "ingest_posts_per_s": {"plain": round(plain_rate), "moderated": round(mod_rate), "ratio": round(mod_rate / plain_rate, 3)},
        "query_p50_us": {
            name: {"plain": round(plain_q[name], 1), "moderated": round(mod_q[name], 1), "ratio": round(mod_q[name] / plain_q[name], 3)}
            for name in QUERIES
        },
        "state": {k: len(v) if isinstance(v, dict) else v for k, v in state.items() if k != "local_user"},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.moderation", description=__doc__.splitlines()[0])
    parser.add_argument("--posts", default="100000", help="comma-separated workload sizes (default: 100000)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--calls", type=int, default=300, help="calls per query (default: 300)")
    args = parser.parse_args(argv)
    results = [run(int(n), args.seed, args.calls) for n in args.posts.split(",")]
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
