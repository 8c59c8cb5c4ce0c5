"""Rebuild verify timings only: the in-process engine against Spark local[1] / local[2], on one store.

    python -m benchmarks.rebuild --posts 100000,1000000 --out bench-rebuild

For each size: a store built by trusted ingest (reused if present), then
``check(store)`` timed with the local engine (in one process, and with
signatures checked in a worker process; ``--skip-local`` leaves these out),
the Parquet export (with one thread and with the default threads) and the
snapshot's size against the store's, and on Spark for each master both the
whole verify (export + job) and the job alone on a snapshot exported once.
JVM start-up is not counted (the session is started first).  Spark runs
also record the CPU seconds of the whole process tree (driver, JVM, Python
workers), which, unlike wall time, do not grow when other jobs share the
machine.  Results go to ``OUT/rebuild.json`` and a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

from .cluster import proc_stats

NOW = 1_900_000_000_000


def build_store(out: Path, n: int, seed: int) -> Path:
    from cablestore import Store
    from cablestore.authoring.workload import Workload, iter_posts, write_posts

    posts = out / f"posts-{n}-seed{seed}.bin"
    if not posts.exists():
        write_posts(posts, Workload(seed, n))
    store = out / f"store-{n}"
    if not (store / "CURRENT").exists():
        shutil.rmtree(store, ignore_errors=True)
        with Store(store, verify_signatures=False, now=lambda: NOW) as s:
            for chunk in iter_posts(posts, 1000):
                s.ingest_many(chunk)
    return store


def timed(fn):
    start, cpu = time.perf_counter(), time.process_time()
    value = fn()
    return value, time.perf_counter() - start, time.process_time() - cpu


def tree_cpu() -> float:
    """CPU seconds used so far by this process and every live descendant (Spark's JVM, its Python workers), with their reaped children."""
    tick = os.sysconf("SC_CLK_TCK")
    parents, times = {}, {}
    for pid, fields in proc_stats():
        parents[pid] = int(fields[1])
        times[pid] = sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
    found = frontier = {os.getpid()}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found = found | frontier
    return sum(times.get(p, 0) for p in found) / tick


def cpu_timed(fn):
    """``(value, wall seconds, CPU seconds of this process tree)``: the CPU part does not grow when other jobs share the cores."""
    start, cpu = time.perf_counter(), tree_cpu()
    value = fn()
    return value, time.perf_counter() - start, tree_cpu() - cpu


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_size(out: Path, n: int, seed: int, masters: list[str], partitions: int, skip_local: bool = False) -> dict:
    from cablestore import Store
    from cablestore.rebuild import check, export
    from cablestore.rebuild import spark_engine as engine

    store = build_store(out, n, seed)
    result: dict = {"posts": n, "partitions": partitions}
    with Store(store, create=False, now=lambda: NOW) as s:
        if not skip_local:
            report, wall, cpu = timed(lambda: check(s, engine="local", partitions=partitions, verify_workers=0))
            assert report.consistent, report.to_dict()
            result["local"] = {"seconds": wall, "cpu_seconds": cpu, "posts": report.posts}
            # The default: signatures checked in one worker process, a batch ahead.
            report, wall, cpu = timed(lambda: check(s, engine="local", partitions=partitions, verify_workers=1))
            assert report.consistent, report.to_dict()
            result["local_1_worker"] = {"seconds": wall, "cpu_seconds": cpu}
        snap = out / f"snap-{n}"
        shutil.rmtree(snap, ignore_errors=True)
        _, result["export_1_thread_seconds"], _ = timed(lambda: export(s.db, snap, partitions, workers=1))
        shutil.rmtree(snap, ignore_errors=True)
        manifest, result["export_seconds"], _ = timed(lambda: export(s.db, snap, partitions))
        result["snapshot_bytes"] = sum(f["bytes"] for f in manifest["files"].values())
        result["store_bytes"] = disk_bytes(store)
        for master in masters:
            spark = engine.session(master)
            try:
                spark.sparkContext.parallelize([0], 1).count()  # executors' Python started before timing
                report, wall, cpu = cpu_timed(lambda: check(s, engine="spark", partitions=partitions))
                assert report.consistent, report.to_dict()
                _, job, job_cpu = cpu_timed(lambda spark=spark: engine.run(snap, spark=spark))
                result[master] = {"seconds": wall, "job_seconds": job, "cpu_seconds": cpu, "job_cpu_seconds": job_cpu}
            finally:
                spark.stop()
        shutil.rmtree(snap, ignore_errors=True)
    if "local[1]" in result and "local[2]" in result:
        result["speedup_2_over_1"] = result["local[1]"]["seconds"] / result["local[2]"]["seconds"]
        result["job_speedup_2_over_1"] = result["local[1]"]["job_seconds"] / result["local[2]"]["job_seconds"]
    return result


def markdown(results: list[dict], command: str) -> str:
    lines = [
        "| posts | local, one process | local, signatures in a worker | export (1 thread) | snapshot / store | "
        "Spark local[1]: verify (job) | Spark local[2]: verify (job) | local[2] / local[1] (job) | CPU of a verify, local[1] / local[2] |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        def sp(m, r=r):
            return f"{r[m]['seconds']:.1f} s ({r[m]['job_seconds']:.1f} s)" if m in r else "-"

        ratio = f"{r['speedup_2_over_1']:.2f}x ({r['job_speedup_2_over_1']:.2f}x)" if "speedup_2_over_1" in r else "-"
        worker = f"{r['local_1_worker']['seconds']:.1f} s" if "local_1_worker" in r else "-"
        local = f"{r['local']['seconds']:.1f} s" if "local" in r else "-"
        export = f"{r['export_seconds']:.1f} s ({r['export_1_thread_seconds']:.1f} s)"
        size = f"{r['snapshot_bytes'] / 1e6:.0f} MB / {r['store_bytes'] / 1e6:.0f} MB = {r['snapshot_bytes'] / r['store_bytes']:.2f}"
        cpu = " / ".join(f"{r[m]['cpu_seconds']:.1f} s" if m in r and "cpu_seconds" in r[m] else "-" for m in ("local[1]", "local[2]"))
        lines.append(f"| {r['posts']:,} | {local} | {worker} | {export} | {size} | {sp('local[1]')} | {sp('local[2]')} | {ratio} | {cpu} |")
    load = " / ".join(f"{a:.1f}" for a in os.getloadavg())
    lines += ["", f"Command: `{command}`", f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; load average at the end {load}"]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rebuild", description=__doc__.splitlines()[0])
    parser.add_argument("--posts", default="100000", help="comma-separated store sizes (default: 100000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--masters", default="local[1],local[2]", help="Spark masters to time (default: local[1],local[2]; '' for none)")
    parser.add_argument("--out", default="bench-rebuild", help="directory for posts, stores and results")
    parser.add_argument("--skip-local", action="store_true", help="leave the in-process engine's timings out")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    masters = [m for m in args.masters.split(",") if m]
    command = "python -m benchmarks.rebuild " + " ".join(argv if argv is not None else sys.argv[1:])
    results = []
    for n in (int(s) for s in args.posts.split(",")):
        print(f"rebuild benchmark: {n:,} posts...", file=sys.stderr)
        results.append(run_size(out, n, args.seed, masters, args.partitions, args.skip_local))
        (out / "rebuild.json").write_text(json.dumps({"command": command, "results": results}, indent=2))
    print(markdown(results, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
