"""cablestore benchmarks: ingest, queries, rebuild, disk and memory, as ratios from one run.

    python -m benchmarks --posts 10000,100000

Machines here are shared and noisy, so every speed is reported next to a
reference measured in the same run (ingest against pynacl's raw Ed25519
verify rate on the same posts; Spark local[2] against local[1]).  Results go
to ``OUT/results.json`` and ``OUT/results.md``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import resource
import shutil
import statistics
import sys
import time
from pathlib import Path

from cablestore import Store, post_hash
from cablestore.authoring.workload import Workload, iter_posts, read_posts, write_posts
from cablestore.wire.crypto import THREADED

NOW = 1_900_000_000_000  # far enough ahead of the generated timestamps


def posts_for(out: Path, n: int, seed: int) -> list[bytes]:
    path = out / f"posts-{n}-seed{seed}.bin"
    if not path.exists():
        write_posts(path, Workload(seed, n))
    return read_posts(path)


def raw_verify_rate(bufs, cpu: list | None = None) -> float:
    """pynacl's public verify API on the same posts, one core (``cpu``: gets the CPU µs per post appended)."""
    from nacl.signing import VerifyKey

    start, cpu_start = time.perf_counter(), time.thread_time()
    for buf in bufs:
        VerifyKey(buf[:32]).verify(buf[96:], buf[32:96])
    if cpu is not None:
        cpu.append((time.thread_time() - cpu_start) * 1e6 / len(bufs))
    return len(bufs) / (time.perf_counter() - start)


def _anon_mb() -> float:
    """Anonymous resident memory: RSS without LevelDB's mmapped (reclaimable) table pages."""
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return 0.0


CURVE_POINTS = 20  # samples of rate and memory through each ingest


def _ingest_child(path, posts_file, n, verify, batch, workers, conn, pipelined=False):
    # Posts are streamed from the file, so the memory is the store's, not the input's.
    peak_anon = 0.0
    # [posts stored, posts/s over the last stretch, anonymous MB, CPU µs per post of the
    # whole process (with LevelDB's compaction thread), CPU µs per post of the indexing thread]
    curve = []
    every = max(batch, n // CURVE_POINTS)
    with Store(path, verify_signatures=verify, verify_workers=workers, now=lambda: NOW) as store:
        start = last = time.perf_counter()
        cpu = cpu_start = time.process_time()
        main = main_start = time.thread_time()
        done = mark = 0
        # Pipelined: Store.ingest_batches, whose workers verify the next batch while this one is indexed.
        batches = iter_posts(posts_file, batch)
        for results in store.ingest_batches(batches) if pipelined else map(store.ingest_many, batches):
            done += len(results)
            anon = _anon_mb()
            peak_anon = max(peak_anon, anon)
            if done - mark >= every:
                now, cpu_now, main_now = time.perf_counter(), time.process_time(), time.thread_time()
                k = 1e6 / (done - mark)
                curve.append([done, (done - mark) / (now - last), anon, (cpu_now - cpu) * k, (main_now - main) * k])
                mark, last, cpu, main = done, now, cpu_now, main_now
        seconds = time.perf_counter() - start
        cpu_us = (time.process_time() - cpu_start) * 1e6 / max(done, 1)
        main_us = (time.thread_time() - main_start) * 1e6 / max(done, 1)
    conn.send((seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, peak_anon, curve, cpu_us, main_us))


def timed_ingest(path: Path, posts_file: Path, n: int, verify: bool, batch: int = 1000, workers: int = 0, pipelined: bool = False) -> dict:
    """Ingest in a fresh process so its peak RSS is the ingest's own."""
    shutil.rmtree(path, ignore_errors=True)
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_ingest_child, args=(str(path), str(posts_file), n, verify, batch, workers, child, pipelined))
    proc.start()
    child.close()  # as in timed_reindex: a child that dies ends recv() instead of blocking it
    try:
        seconds, rss, anon, curve, cpu_us, main_us = parent.recv()
    except EOFError:
        proc.join()
        raise RuntimeError(f"the ingest process exited with code {proc.exitcode} before reporting") from None
    finally:
        parent.close()
    proc.join()
    out = {"posts_per_s": n / seconds, "seconds": seconds, "peak_rss_mb": rss / 2**20, "peak_anon_mb": anon, "curve": curve}
    out.update(cpu_us_per_post=cpu_us, main_thread_cpu_us_per_post=main_us, load_average=os.getloadavg()[0])
    if len(curve) >= 2:  # the first and the last stretch (50k posts each at 1M)
        out["last_over_first"] = curve[-1][1] / curve[0][1]
        out["last_over_first_cpu"] = curve[0][3] / curve[-1][3]
    return out


def _reindex_child(path, conn):
    from cablestore.rebuild.reindex import reindex

    with Store(path, now=lambda: NOW) as store:
        report = reindex(store)
    conn.send((report.to_dict(), _anon_mb()))


def timed_reindex(path: Path) -> dict:
    """``cablestore reindex`` of a built store, in a fresh process."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_reindex_child, args=(str(path), child))
    proc.start()
    child.close()  # the child's end lives only in the child: its exit ends recv() instead of blocking it forever
    try:
        report, anon = parent.recv()
    except EOFError:
        proc.join()
        raise RuntimeError(f"the reindex process exited with code {proc.exitcode} before reporting") from None
    finally:
        parent.close()
    proc.join()
    return {"posts_per_s": report["posts_per_s"], "seconds": sum(report["seconds"].values()), "phases": report["seconds"], "anon_mb": anon}


def percentiles(fn, args_list) -> dict:
    times = []
    for args in args_list:
        start = time.perf_counter_ns()
        fn(*args)
        times.append((time.perf_counter_ns() - start) / 1000)
    times.sort()
    return {"p50_us": statistics.median(times), "p99_us": times[int(len(times) * 0.99) - 1]}


def query_latencies(store: Store, bufs, rng: random.Random, calls: int = 1000) -> dict:
    channels = store.channel_list()
    hashes = [post_hash(b) for b in rng.sample(bufs, min(calls, len(bufs)))]
    lo, hi = 1_700_000_000_000, 1_700_000_000_000 + len(bufs) * 2500
    windows = [(rng.choice(channels), s, s + 3_600_000 * 24, 50) for s in (rng.randint(lo, hi) for _ in range(calls))]
    return {
        "channel_time_range_50": percentiles(store.channel_time_range, windows),
        "channel_state": percentiles(store.channel_state, [(rng.choice(channels),) for _ in range(calls // 4)]),
        "channel_list": percentiles(store.channel_list, [() for _ in range(calls // 4)]),
        "get": percentiles(store.get, [(h,) for h in hashes]),
    }


def disk_usage(path: Path) -> dict:
    """Bytes on disk after a reopen (which turns the write-ahead log into a table) and a full compaction."""
    with Store(path, now=lambda: NOW) as store:
        store.db.compact_range()
        raw = sum(len(v) for _, v in store.items(b"!post!"))
        posts = sum(1 for _ in store.items(b"!post!"))
    on_disk = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
    return {"bytes_per_post": on_disk / posts, "raw_bytes_per_post": raw / posts, "ratio": on_disk / raw}


def rebuild_times(store: Store, spark: bool) -> dict:
    from cablestore.rebuild import check

    out = {}
    start = time.perf_counter()
    assert check(store, engine="local").consistent
    out["local_s"] = time.perf_counter() - start
    if spark:
        from cablestore.rebuild.spark_engine import session

        for master in ("local[1]", "local[2]"):
            s = session(master)
            start = time.perf_counter()
            assert check(store, engine="spark").consistent
            out[f"spark_{master}_s"] = time.perf_counter() - start
            s.stop()
        out["spark_2_over_1_speedup"] = out["spark_local[1]_s"] / out["spark_local[2]_s"]
    return out


def batch_sweep(out: Path, posts_file: Path, n: int) -> dict:
    sweep = {}
    for batch in (1, 10, 100, 1000, 10000):
        sweep[str(batch)] = timed_ingest(out / "sweep.ldb", posts_file, n, verify=True, batch=batch)["posts_per_s"]
    return sweep


def run_size(out: Path, n: int, seed: int, spark: bool, sweep_posts: int) -> dict:
    bufs = posts_for(out, n, seed)
    posts_file = out / f"posts-{n}-seed{seed}.bin"
    result: dict = {"posts": n}
    # The reference is taken right before and right after the verified ingests and
    # averaged: on a shared machine the load changes within minutes.
    sample = bufs[: min(len(bufs), 20_000)]
    cpu: list = []
    before = raw_verify_rate(sample, cpu)
    result["verified_ingest"] = timed_ingest(out / "verified.ldb", posts_file, n, verify=True)
    # Threads (the compiled checker): this thread verifies too, so one fewer than the cores; processes: one per core.
    workers = max(1, (os.cpu_count() or 1) - 1) if THREADED else (os.cpu_count() or 1)
    several = (os.cpu_count() or 1) > 1
    par = timed_ingest(out / "verified-workers.ldb", posts_file, n, verify=True, workers=workers) if several else None
    piped = timed_ingest(out / "verified-workers.ldb", posts_file, n, verify=True, workers=workers, pipelined=True) if several else None
    after = raw_verify_rate(sample, cpu)
    result["raw_verify_per_s"] = (before + after) / 2
    # The same ratio in CPU time, which the other sessions' load disturbs far less than
    # wall time: raw verify's CPU per post over the ingest's (whole process, LevelDB included).
    result["raw_verify_cpu_us"] = sum(cpu) / len(cpu)
    result["verified_ingest"]["cpu_ratio_to_raw_verify"] = result["raw_verify_cpu_us"] / result["verified_ingest"]["cpu_us_per_post"]
    result["raw_verify_before_after"] = [before, after]
    result["verified_ingest"]["ratio_to_raw_verify"] = result["verified_ingest"]["posts_per_s"] / result["raw_verify_per_s"]
    if piped is not None:
        piped["ratio_to_raw_verify"] = piped["posts_per_s"] / result["raw_verify_per_s"]
        piped["workers"] = workers
        result["verified_ingest_pipelined"] = piped
    if par is not None:
        par["ratio_to_raw_verify"] = par["posts_per_s"] / result["raw_verify_per_s"]
        par["workers"] = workers
        result["verified_ingest_workers"] = par
    result["trusted_reindex"] = timed_ingest(out / "trusted.ldb", posts_file, n, verify=False)
    result["bulk_reindex"] = timed_reindex(out / "trusted.ldb")
    if sweep_posts:
        sweep_file = out / f"posts-{sweep_posts}-seed{seed}.bin"
        posts_for(out, sweep_posts, seed)
        result["batch_sweep_posts_per_s"] = batch_sweep(out, sweep_file, sweep_posts)
    with Store(out / "verified.ldb", now=lambda: NOW) as store:
        result["queries"] = query_latencies(store, bufs, random.Random(seed))
        result["rebuild"] = rebuild_times(store, spark)
    result["disk"] = disk_usage(out / "verified.ldb")
    return result


def markdown(results: list[dict], machine: str, command: str) -> str:
    rows = [
        ("raw Ed25519 verify (pynacl, 1 core)", lambda r: f"{r['raw_verify_per_s']:,.0f} /s"),
        ("verified ingest", lambda r: f"{r['verified_ingest']['posts_per_s']:,.0f} /s"),
        ("verified ingest / raw verify", lambda r: f"{r['verified_ingest']['ratio_to_raw_verify']:.2f}"),
        ("the same in CPU time: raw verify CPU per post / verified ingest CPU per post", lambda r: _cpu_ratio(r)),
        ("verified ingest, signatures on verify workers too", lambda r: _workers(r)),
        ("the same, next batch verified while this one is indexed (`ingest_batches`)", lambda r: _workers(r, "verified_ingest_pipelined")),
        ("trusted ingest (no signature checks)", lambda r: f"{r['trusted_reindex']['posts_per_s']:,.0f} /s"),
        ("trusted ingest / at the smallest size", lambda r: f"{r['trusted_reindex']['posts_per_s'] / results[0]['trusted_reindex']['posts_per_s']:.2f}"),
        ("trusted ingest, last / first stretch of 5% (wall; CPU per post)", lambda r: _flat(r["trusted_reindex"])),
        ("ingest CPU per post: process / indexing thread (verified; trusted)", lambda r: _cpu(r)),
        ("bulk reindex (`cablestore reindex`)", lambda r: _reindex(r)),
        ("ingest peak RSS (of which anonymous, not mmapped tables)", lambda r: _rss(r["verified_ingest"])),
        ("channel time range (limit 50) p50 / p99", lambda r: _lat(r, "channel_time_range_50")),
        ("channel state p50 / p99", lambda r: _lat(r, "channel_state")),
        ("channel list p50 / p99", lambda r: _lat(r, "channel_list")),
        ("get by hash p50 / p99", lambda r: _lat(r, "get")),
        ("disk per post (compacted) / raw post bytes", lambda r: f"{r['disk']['bytes_per_post']:.0f} B / {r['disk']['raw_bytes_per_post']:.0f} B = {r['disk']['ratio']:.2f}x"),
        ("rebuild verify, local engine", lambda r: f"{r['rebuild']['local_s']:.1f} s"),
        ("rebuild verify, Spark local[1] / local[2]", lambda r: _spark(r)),
    ]
    head = "| measure | " + " | ".join(f"{r['posts']:,} posts" for r in results) + " |"
    lines = [head, "|---|" + "---|" * len(results)]
    for name, fmt in rows:
        lines.append(f"| {name} | " + " | ".join(fmt(r) for r in results) + " |")
    sweep = [r for r in results if "batch_sweep_posts_per_s" in r]
    if sweep:
        s = sweep[0]["batch_sweep_posts_per_s"]
        lines.append("")
        lines.append("`ingest_many` batch size sweep (verified): " + ", ".join(f"{k}: {v:,.0f}/s" for k, v in s.items()))
    lines += ["", f"Command: `{command}`", f"Machine: {machine}"]
    return "\n".join(lines)


def _cpu_ratio(r):
    v = r["verified_ingest"]
    if "cpu_ratio_to_raw_verify" not in v:
        return "n/a"
    return f"{r['raw_verify_cpu_us']:.0f} / {v['cpu_us_per_post']:.0f} µs = {v['cpu_ratio_to_raw_verify']:.2f}"


def _flat(ingest):
    if "last_over_first" not in ingest:
        return "n/a"
    return f"{ingest['last_over_first']:.2f} ({ingest['curve'][0][1]:,.0f} → {ingest['curve'][-1][1]:,.0f} /s); {ingest['last_over_first_cpu']:.2f}"


def _cpu(r):
    v, t = r["verified_ingest"], r["trusted_reindex"]
    if "cpu_us_per_post" not in v:
        return "n/a"
    return f"{v['cpu_us_per_post']:.0f} / {v['main_thread_cpu_us_per_post']:.0f} µs; {t['cpu_us_per_post']:.0f} / {t['main_thread_cpu_us_per_post']:.0f} µs"


def _reindex(r):
    b = r.get("bulk_reindex")
    return f"{b['posts_per_s']:,.0f} /s ({b['seconds']:.1f} s)" if b else "not run"


def _rss(ingest):
    anon = ingest.get("peak_anon_mb")
    return f"{ingest['peak_rss_mb']:.0f} MB" + (f" ({anon:.0f} MB)" if anon is not None else "")


def _workers(r, name="verified_ingest_workers"):
    w = r.get(name)
    if not w:
        return "n/a (1 core)"
    n = w["workers"]
    kind = f"{n} thread{'s' if n > 1 else ''} + this one" if THREADED else f"{n} process{'es' if n > 1 else ''}"
    return f"{w['posts_per_s']:,.0f} /s ({kind}; {w['ratio_to_raw_verify']:.2f}x raw)"


def _lat(r, name):
    q = r["queries"][name]
    return f"{q['p50_us']:.0f} µs / {q['p99_us']:.0f} µs"


def _spark(r):
    rb = r["rebuild"]
    if "spark_local[1]_s" not in rb:
        return "not run"
    return f"{rb['spark_local[1]_s']:.1f} s / {rb['spark_local[2]_s']:.1f} s ({rb['spark_2_over_1_speedup']:.2f}x)"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--posts", default="10000", help="comma-separated store sizes (default: 10000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="bench-results", help="directory for posts, stores and results")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark rebuild timings")
    parser.add_argument("--sweep-posts", type=int, default=20000, help="posts for the batch-size sweep (0: skip)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.posts.split(",")]
    from cablestore.compiled import HOT_PATH

    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.platform()}; hot path: {HOT_PATH}"
    command = "python -m benchmarks " + " ".join(argv if argv is not None else sys.argv[1:])
    results = []
    for i, n in enumerate(sizes):
        print(f"benchmarking {n:,} posts...", file=sys.stderr)
        results.append(run_size(out, n, args.seed, not args.no_spark, args.sweep_posts if i == 0 else 0))
        (out / "results.json").write_text(json.dumps({"machine": machine, "command": command, "results": results}, indent=2))
    load = os.getloadavg()
    machine += f"; load average {load[0]:.1f} at the end (shared machine)"
    table = markdown(results, machine, command)
    try:
        from .chart import draw

        draw(results, out / "chart.png")
    except ImportError:
        print("matplotlib not installed (pip install -e '.[bench]'): no chart", file=sys.stderr)
    (out / "results.json").write_text(json.dumps({"machine": machine, "command": command, "results": results}, indent=2))
    (out / "results.md").write_text(table + "\n")
    print(table)
    return 0
