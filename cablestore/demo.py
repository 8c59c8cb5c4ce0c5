"""The README's main job: build a sample store, answer requests, verify it on Spark."""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from .codec import decode_post
from .progress import Progress
from .store import Store
from .workload import Workload


def run_demo(directory=None, posts=2000, seed=1, quiet=False, engine="spark", out=print) -> dict:
    say = (lambda *a: None) if quiet else out
    progress = Progress(quiet=quiet)
    tmp = None
    if directory is None:
        tmp = directory = tempfile.mkdtemp(prefix="cablestore-demo-")
    try:
        return _demo(Path(directory), posts, seed, engine, say, progress)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _demo(path, posts, seed, engine, say, progress) -> dict:
    from .rebuild import check

    report: dict = {"store": str(path), "posts": posts, "seed": seed}
    say(f"cablestore demo: {posts} signed posts (seed {seed}) into {path}")
    progress.stage("generate + sign", posts)
    bufs = []
    for buf in Workload(seed, posts):
        bufs.append(buf)
        progress.advance()
    with Store(path) as store:
        progress.stage("verify + ingest", posts)
        start = time.perf_counter()
        results = []
        for i in range(0, len(bufs), 500):
            results += store.ingest_many(bufs[i : i + 500])
            progress.advance(len(bufs[i : i + 500]))
        progress.done()
        seconds = time.perf_counter() - start
        report["ingest"] = {"accepted": sum(r.ok for r in results), "refused": sum(not r.ok for r in results), "seconds": round(seconds, 3)}
        say(f"ingested {report['ingest']['accepted']} posts in {seconds:.2f}s ({posts / seconds:,.0f} posts/s, signatures verified)")
        report["channels"] = _show_channels(store, say)
        say(f"rebuild verify ({engine} engine)...")
        verify = check(store, engine=engine, progress=progress, partitions=4)
        report["rebuild"] = verify.to_dict()
        report["ok"] = verify.consistent and report["ingest"]["refused"] == 0
        say(f"rebuild verify: {'consistent' if verify.consistent else 'DIFFERENCES FOUND'} "
            f"({verify.posts} posts, {sum(verify.recomputed_counts.values())} view entries recomputed)")
    return report


def _show_channels(store, say) -> dict:
    out = {}
    say(f"channel list: {', '.join(store.channel_list())}")
    for name in store.channel_list():
        latest = store.channel_time_range(name, 0, 0, limit=3)
        topic = store.topic(name)
        members = store.members(name)
        out[name] = {"topic": topic, "members": len(members), "posts": len(store.channel_time_range(name)),
                     "state": len(store.channel_state(name))}
        say(f"  #{name}: topic {topic!r}, {len(members)} members, {out[name]['posts']} chat posts")
        for h in latest:
            p = decode_post(store.get(h))
            who = store.name(p.public_key) or p.public_key.hex()[:8]
            line = p.text if p.text is not None else f"(deleted {len(p.hashes)} post(s))"
            say(f"    {p.timestamp} <{who}> {line[:60]}")
    return out
