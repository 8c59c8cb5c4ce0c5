"""The README's main job: build a sample store, answer requests, verify it (on Spark where Java 17+ is found)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cablestore.authoring.workload import Workload
from cablestore.errors import RebuildError, StoreExistsError
from cablestore.progress import Progress, plural
from cablestore.store.lifecycle import opening
from cablestore.store.store import Store


def run_demo(
    directory: str | os.PathLike | None = None,
    posts: int = 2000,
    seed: int = 1,
    quiet: bool = False,
    engine: str = "auto",
    out: Callable[..., Any] = print,
) -> dict[str, Any]:
    """Build a sample store of ``posts`` signed posts, print what it answers, verify it.

    ``engine``: ``"auto"`` verifies on Spark where Java 17 or newer is found
    and otherwise on the local engine, saying so in one line before any work;
    ``"spark"`` refuses up front without Java (:class:`cablestore.errors.RebuildError`);
    ``"local"`` never starts Spark.  Returns a JSON-ready report
    (``report["ok"]``: everything was accepted and the rebuild found the store
    consistent; ``report["engine"]``: the engine that verified).  Without
    ``directory`` the store lives in a temporary directory removed afterwards;
    a ``directory`` must be new (missing, or an empty directory): the demo
    never writes into an existing store (:class:`cablestore.errors.StoreExistsError`).
    """
    if directory is not None:
        _refuse_existing(Path(directory))
    engine, note = choose_engine(engine)
    say = (lambda *a: None) if quiet else out
    if note:
        say(note)
    progress = Progress(quiet=quiet)
    tmp = None
    if directory is None:
        tmp = directory = tempfile.mkdtemp(prefix="cablestore-demo-")
    try:
        report = _demo(Path(directory), posts, seed, engine, say, progress)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
            say(f"deleted the temporary store {tmp} (--dir DIR keeps one)")
    return {**report, "engine": engine, "engine_note": note}


def choose_engine(engine: str) -> tuple[str, str | None]:
    """The engine the demo verifies with, and the one line that says why it is not Spark (or None).

    Decided before any work: Java's presence and version are read without
    starting a JVM (``cablestore.rebuild.spark_runtime.java_problem``).
    """
    from cablestore.rebuild.spark_runtime import java_problem, require_java

    if engine not in ("auto", "spark", "local"):
        raise RebuildError(f"unknown engine {engine!r} (auto, spark or local)")
    if engine == "local":
        return "local", None
    problem = java_problem()
    if problem is None:
        return "spark", None
    if engine == "spark":
        require_java()  # raises: asked for Spark by name, refused before the work
    return "local", f"Spark needs Java 17 or newer ({problem}): verifying on the local engine instead, the same recomputation in-process"


def _refuse_existing(path: Path) -> None:
    """The demo builds a new store: refuse a path that holds anything, before printing a line."""
    kind = opening.classify(path)
    if kind not in (opening.Kind.MISSING, opening.Kind.EMPTY):
        what = {opening.Kind.STORE: "holds a store already", opening.Kind.FILE: "is a file"}.get(kind, "is not an empty directory")
        raise StoreExistsError(f"{path} {what}; the demo builds its store in a new or empty directory; nothing was changed")


def _demo(path, posts, seed, engine, say, progress) -> dict:
    from cablestore.rebuild import check

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
        accepted = sum(r.ok for r in results)
        stats = store.stats()
        report["ingest"] = {"accepted": accepted, "refused": len(results) - accepted, "seconds": round(seconds, 3)}
        report["stored"] = {"posts": stats.posts, "deleted": accepted - stats.posts, "tombstones": stats.tombstones}
        say(f"ingested {plural(accepted, 'post')} in {seconds:.2f}s ({posts / seconds:,.0f} posts/s, signatures verified)")
        say(_explain(report["stored"], accepted))
        report["channels"] = _show_channels(store, say)
        say(f"rebuild verify ({engine} engine)...")
        verify = check(store, engine=engine, progress=progress, partitions=4)
        report["rebuild"] = verify.to_dict()
        report["ok"] = verify.consistent and report["ingest"]["refused"] == 0
        entries = sum(verify.recomputed_counts.values())
        if verify.consistent:
            say(f"rebuild verify: consistent: {plural(verify.posts, 'stored post')} and {plural(verify.tombstones, 'tombstone')} "
                f"recompute to {plural(entries, 'view entry', 'view entries')}, equal to the live views")
        else:
            say(f"rebuild verify: DIFFERENCES FOUND ({plural(verify.posts, 'post')}, {plural(entries, 'view entry', 'view entries')} recomputed)")
    return report


def _explain(stored: dict, accepted: int) -> str:
    """Why fewer posts are stored (and verified) than were ingested: deletes."""
    return (
        f"  {plural(stored['posts'], 'post')} {'is' if stored['posts'] == 1 else 'are'} stored: the other {accepted - stored['posts']} were deleted by post/deletes "
        f"among them (some of those deletes were deleted too)\n"
        f"  the rebuild below checks those {plural(stored['posts'], 'post')} and the {plural(stored['tombstones'], 'tombstone')} the deletes left"
    )


def _show_channels(store: Store, say: Callable[..., Any]) -> dict:
    out = {}
    say(f"channel list: {', '.join(store.channel_list())}")
    for name in store.channel_list():
        topic = store.topic(name)
        members = store.members(name)
        out[name] = {"topic": topic, "members": len(members), "posts": len(store.channel_time_range(name)),
                     "state": len(store.channel_state(name))}
        shown = f"topic {topic!r}" if topic else "(no topic)"
        say(f"  #{name}: {shown}, {plural(len(members), 'member')}, {plural(out[name]['posts'], 'message')}; the latest (UTC):")
        for m in store.messages(name, limit=3):
            line = m.text if m.text is not None else f"[deleted {plural(len(m.deleted), 'post')}]"
            say(f"    {m.time:%Y-%m-%d %H:%M:%S} <{m.who}> {line[:60]}")
    return out
