"""A Spark standalone cluster on 127.0.0.1 from the pyspark package itself, and a rebuild on it.

    python -m benchmarks.cluster --posts 100000 --workers 2

starts a master and N workers with the ``spark-class`` that ships in the
pyspark wheel (no download), builds a store, exports a snapshot, runs
``cablestore rebuild --snapshot DIR --master spark://127.0.0.1:PORT`` and the
in-process engine on the same snapshot, compares the reports and prints the
timings; every process it started is stopped by process group, also on
failure.  As an operator would: the workers start with a bare environment
(no virtualenv, no ``PYSPARK_PYTHON``, a PATH whose ``python3`` has no
cablestore) and the driver runs from a virtualenv used by path, so the
executors run the environment the driver ships them.
``tests/test_cluster.py`` runs the same with a small store.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bare_path(base: Path) -> str:
    """A PATH as a fresh node has: system directories only, and a ``python3`` that fails (cablestore is not there)."""
    fake = base / "no-python"
    fake.mkdir(parents=True, exist_ok=True)
    for name in ("python3", "python"):
        script = fake / name
        script.write_text("#!/bin/sh\necho 'no Python with cablestore on this node' >&2\nexit 1\n")
        script.chmod(0o755)
    return f"{fake}:/usr/bin:/bin"


def cluster_env(base: Path) -> dict:
    """The bare environment of the master and workers: no virtualenv, no PYSPARK_PYTHON, no PYTHONPATH."""
    keep = ("HOME", "JAVA_HOME", "LANG", "TMPDIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(
        PATH=bare_path(base),
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP="127.0.0.1",  # bind loopback, not the first interface
        SPARK_LOG_DIR=str(base / "logs"),
        SPARK_PID_DIR=str(base / "pids"),
    )
    return env


def driver_env(base: Path) -> dict:
    """The driver's: as bare, with its own cache of packed environments (so a run packs from scratch)."""
    env = cluster_env(base)
    env["XDG_CACHE_HOME"] = str(base / "cache")
    return env


def unactivated_venv(base: Path) -> Path:
    """A virtualenv made from this Python (seeing its packages), used by path without activating it: its python."""
    venv = base / "venv"
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True)
    return venv / "bin" / "python"


class LocalCluster:
    """A master and ``workers`` workers (``cores`` and ``memory`` each) on 127.0.0.1; a context manager."""

    def __init__(self, base: Path, workers: int = 2, cores: int = 1, memory: str = "1g", timeout: float = 180.0):
        self.base = Path(base)
        self.workers, self.cores, self.memory, self.timeout = workers, cores, memory, timeout
        self.env = cluster_env(self.base)
        self.procs: list[subprocess.Popen] = []
        self.port, self.ui_port = free_port(), free_port()
        self.master = f"spark://127.0.0.1:{self.port}"

    def _start(self, name: str, args: list[str]) -> None:
        log = open(self.base / "logs" / f"{name}.out", "wb")
        cls = "org.apache.spark.deploy." + ("master.Master" if name == "master" else "worker.Worker")
        proc = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), cls, *args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: executors and their Python workers die with it
        )
        log.close()
        self.procs.append(proc)

    def start(self) -> LocalCluster:
        for d in ("logs", "pids", "work"):
            (self.base / d).mkdir(parents=True, exist_ok=True)
        try:
            self._start("master", ["--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui_port)])
            self._wait(lambda: self._status() is not None, "the master to listen")
            for i in range(self.workers):
                work = self.base / "work" / f"worker-{i}"
                work.mkdir(parents=True, exist_ok=True)
                self._start(
                    f"worker-{i}",
                    ["--host", "127.0.0.1", "--webui-port", str(free_port()), "--cores", str(self.cores),
                     "--memory", self.memory, "--work-dir", str(work), self.master],
                )
            self._wait(lambda: (self._status() or {}).get("aliveworkers") == self.workers, f"{self.workers} workers to register")
        except BaseException:
            self.stop()
            raise
        return self

    def _status(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
                return json.load(r)
        except (OSError, ValueError):
            return None

    def _wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}; logs in {self.base / 'logs'}")
            dead = [p.args[1] for p in self.procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"{dead} exited; logs in {self.base / 'logs'}")
            time.sleep(0.25)

    def applications(self) -> list[dict]:
        """Completed and running applications, as the master lists them."""
        status = self._status() or {}
        return status.get("completedapps", []) + status.get("activeapps", [])

    def stop(self) -> None:
        """SIGTERM each process group started (workers first), then SIGKILL what is left after 20 s."""
        for proc in reversed(self.procs):
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def proc_stats():
    """``(pid, fields)`` of every live process: the fields of ``/proc/PID/stat`` after the command name (state first)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # gone meanwhile
                continue
            yield int(entry), fields


def group_alive(pgid: int) -> bool:
    """True while any process of the group exists (zombies excepted)."""
    return any(int(fields[2]) == pgid and fields[0] != "Z" for _, fields in proc_stats())


def rebuild_json(args: list[str], env: dict, timeout: float = 1800, python: str | os.PathLike = sys.executable) -> tuple[dict, float]:
    """Run ``PYTHON -m cablestore rebuild ... --json``; return the report (without engine and timings) and the wall time."""
    start = time.perf_counter()
    done = subprocess.run([str(python), "-m", "cablestore", "rebuild", *args, "--json"], env=env, capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise RuntimeError(f"cablestore rebuild {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
    report = json.loads(done.stdout)
    for volatile in ("engine", "seconds"):
        report.pop(volatile)
    return report, seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=100_000, help="posts in the store (default: 100000)")
    parser.add_argument("--workers", type=int, default=2, help="Spark workers, one core each (default: 2)")
    parser.add_argument("--memory", default="1g", help="memory per worker (default: 1g)")
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--out", default=None, help="keep the store, snapshot and logs here (default: a temporary directory)")
    args = parser.parse_args(argv)
    from cablestore import Store
    from cablestore.authoring.workload import Workload, iter_posts, write_posts

    base = Path(args.out or tempfile.mkdtemp(prefix="cablestore-cluster-"))
    base.mkdir(parents=True, exist_ok=True)
    posts = base / f"posts-{args.posts}.bin"
    if not posts.exists():
        write_posts(posts, Workload(1, args.posts))
    store, snap = base / "store", base / "snap"
    if not store.exists():
        with Store(store, now=lambda: 1_900_000_000_000) as s:
            for chunk in iter_posts(posts, 1000):
                s.ingest_many(chunk)
    if not snap.exists():
        subprocess.run([sys.executable, "-m", "cablestore", "export", str(store), str(snap), "--partitions", str(args.partitions), "--quiet"], check=True)
    python, env = unactivated_venv(base), driver_env(base)
    with LocalCluster(base / "cluster", workers=args.workers, memory=args.memory) as cluster:
        spark_report, spark_s = rebuild_json(["--snapshot", str(snap), "--master", cluster.master], env, python=python)
        _, again_s = rebuild_json(["--snapshot", str(snap), "--master", cluster.master], env, python=python)
    local_report, local_s = rebuild_json(["--snapshot", str(snap), "--engine", "local"], env, python=python)
    same = spark_report == local_report
    print(
        f"{args.posts:,} posts, {args.partitions} partitions: cluster of {args.workers} workers {spark_s:.1f} s "
        f"(packing the environment), {again_s:.1f} s (cached); in-process {local_s:.1f} s; reports {'identical' if same else 'DIFFER'}"
    )
    if not args.out:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
