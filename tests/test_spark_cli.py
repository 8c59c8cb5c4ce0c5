"""The Spark engine as a user meets it from the command line: real JVM, real subprocesses, real signals.

Each test runs ``python -m cablestore`` with this interpreter but without an
activated virtualenv: PATH's ``python3`` is a script that fails, so a run
passes only if the executors use the driver's interpreter.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from cablestore import Store
from cablestore.authoring.workload import generate

from .conftest import NOW

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("spark-cli") / "store"
    with Store(path, now=lambda: NOW) as s:
        s.ingest_many(generate(seed=5, posts=300))
    return path


def bare_env(tmp_path: Path) -> dict:
    """An environment as cron or systemd gives: no venv on PATH, and PATH's python3 exits 1."""
    fake = tmp_path / "fake-bin"
    fake.mkdir(exist_ok=True)
    for name in ("python3", "python"):
        script = fake / name
        script.write_text("#!/bin/sh\necho 'not the venv python' >&2\nexit 1\n")
        script.chmod(0o755)
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")}
    env["PATH"] = f"{fake}:/usr/bin:/bin"
    env["TMPDIR"] = str(tmp)  # temporary snapshots and logs land here, where the test can see them
    return env


def cablestore(args, env, timeout=240, **kw):
    return subprocess.run([sys.executable, "-m", "cablestore", *args], env=env, capture_output=True, text=True, timeout=timeout, **kw)


def test_executors_run_the_drivers_python_and_quiet_prints_only_the_result(tmp_path, small_store):
    env = bare_env(tmp_path)
    assert subprocess.run(["python3", "-c", "1"], env=env).returncode == 1  # PATH's python really is broken
    done = cablestore(["rebuild", str(small_store), "--quiet", "--partitions", "4"], env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no Java, log4j or executor lines
    assert done.stdout.startswith("cablestore rebuild --verify:")
    assert done.stdout.rstrip().endswith("result: consistent")
    assert os.listdir(tmp_path / "tmp") == []  # the snapshot and the log are gone after success


def test_executor_python_defaults(monkeypatch):
    from cablestore.rebuild.spark_runtime import executor_python

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert executor_python("local[2]") == sys.executable
    assert executor_python("local") == sys.executable
    assert executor_python("spark://10.0.0.1:7077") == "python3"  # a cluster's nodes have their own paths
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python")
    assert executor_python("local[2]") == "/opt/py/bin/python"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_clean_line(stderr: str) -> str:
    """The CLI's error contract: one line, no Python traceback, no Java stack."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr and "\tat " not in stderr and "at org.apache" not in stderr
    return lines[0]


def test_unreachable_master_fails_fast_in_one_line(tmp_path, small_store):
    env = bare_env(tmp_path)
    start = time.monotonic()
    done = cablestore(["rebuild", str(small_store), "--master", f"spark://127.0.0.1:{free_port()}"], env, timeout=60)
    assert time.monotonic() - start < 30
    assert done.returncode == 2
    line = one_clean_line(done.stderr)
    assert "SparkMasterUnreachableError" in line and "cannot reach Spark master spark://127.0.0.1:" in line
    assert done.stdout == ""
    assert os.listdir(tmp_path / "tmp") == []  # nothing exported, nothing left


def test_a_master_that_never_answers_times_out_and_leaves_no_jvm(tmp_path):
    """Something listens on the port but never speaks Spark: the JVM is killed after the timeout."""
    env = bare_env(tmp_path)
    app = f"cablestore-test-{uuid.uuid4().hex}"
    code = (
        "import sys\n"
        "from cablestore.errors import CableError\n"
        "from cablestore.rebuild.spark_engine import session\n"
        "try:\n"
        f"    session(sys.argv[1], app={app!r}, connect_timeout=6)\n"
        "except CableError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
        "    sys.exit(3)\n"
    )
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        master = f"spark://127.0.0.1:{silent.getsockname()[1]}"
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-c", code, master], env=env, capture_output=True, text=True, timeout=120)
        elapsed = time.monotonic() - start
    assert done.returncode == 3, done.stderr
    assert done.stdout.startswith(f"SparkMasterUnreachableError Spark master {master} did not accept the application within 6 s")
    assert "Spark's log: " in done.stdout
    log = done.stdout.rsplit("Spark's log: ", 1)[1].rstrip().rstrip(")")
    assert os.path.getsize(log) > 0  # the JVM's own lines went there, not to the terminal
    assert done.stderr == ""
    assert elapsed < 90
    assert not wait_for(lambda: processes_matching(app), until=False, seconds=20)  # the JVM is gone


def test_master_with_the_local_engine_is_refused(small_store, capsys):
    from cablestore.cli import main

    assert main(["check", str(small_store), "--master", "spark://127.0.0.1:7077"]) == 2
    err = capsys.readouterr().err
    assert one_clean_line(err).startswith("cablestore check: RebuildError: a Spark master needs the Spark engine")


def test_a_failed_job_says_why_in_one_line_and_keeps_its_log(tmp_path, small_store):
    env = bare_env(tmp_path)
    snap = tmp_path / "snap"
    assert cablestore(["export", str(small_store), str(snap), "--partitions", "2", "--quiet"], env).returncode == 0
    segment = snap / "posts" / "part=0001" / "posts-0001-000.parquet"
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF
    segment.write_bytes(bytes(data))
    done = cablestore(["rebuild", "--snapshot", str(snap), "--quiet"], env)
    assert done.returncode == 2
    line = one_clean_line(done.stderr)
    assert "RebuildError: posts/part=0001/posts-0001-000.parquet: sha256 checksum does not match the manifest" in line
    log = line.rsplit("Spark's log: ", 1)[1].rstrip(")")
    assert Path(log).parent == tmp_path / "tmp" and Path(log).stat().st_size > 0


@pytest.fixture(scope="module")
def medium_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("spark-signals") / "store"
    with Store(path, now=lambda: NOW) as s:
        s.ingest_many(generate(seed=6, posts=3000))
    return path


def children(pid: int) -> set[int]:
    """Every descendant of ``pid`` (from /proc)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def processes_matching(text: str) -> set[int]:
    return {int(p) for p in os.listdir("/proc") if p.isdigit() and text in cmdline(int(p))}


def wait_for(predicate, until=True, seconds=60.0, step=0.05):
    """Poll ``predicate`` (bounded in time) until it is truthy (or falsy with ``until=False``); return its last value."""
    deadline = time.monotonic() + seconds
    value = predicate()
    while bool(value) != until and time.monotonic() < deadline:
        time.sleep(step)
        value = predicate()
    return value


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_a_spark_run_exits_130_and_removes_the_snapshot(tmp_path, medium_store, signum):
    env = bare_env(tmp_path)
    tmp = tmp_path / "tmp"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cablestore", "rebuild", str(medium_store), "--partitions", "4"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        snapshots = lambda: [p for p in os.listdir(tmp) if p.startswith("cablestore-snapshot-")]  # noqa: E731
        workers = lambda: [p for p in children(proc.pid) if "pyspark.daemon" in cmdline(p)]  # noqa: E731
        assert wait_for(lambda: snapshots() and workers() or proc.poll() is not None, seconds=180)
        assert proc.poll() is None, proc.communicate()  # the job is running: executors' Python workers exist
        spawned = children(proc.pid)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert one_clean_line(err) == "cablestore rebuild: interrupted"
    assert out == ""
    assert snapshots() == []
    assert not wait_for(lambda: [p for p in spawned if os.path.exists(f"/proc/{p}") and cmdline(p)], until=False, seconds=30)


def test_a_bad_master_url_says_what_spark_said(tmp_path, small_store):
    """`--master bogus://x` names the cause Spark gave, not only "could not start Spark's JVM"."""
    env = bare_env(tmp_path)
    done = cablestore(["rebuild", str(small_store), "--master", "bogus://x"], env, timeout=120)
    assert done.returncode == 2
    line = one_clean_line(done.stderr)
    assert line.startswith("cablestore rebuild: SparkUnavailableError: could not start Spark's JVM: Master must either be yarn or start with")
    assert "Spark's log: " in line


def test_ctrl_c_during_the_demos_spark_phase_prints_one_line(tmp_path):
    """No py4j traceback on the terminal when the demo's Spark job is interrupted."""
    env = bare_env(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cablestore", "demo", "--posts", "3000", "--dir", str(tmp_path / "demo.ldb")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        workers = lambda: [p for p in children(proc.pid) if "pyspark.daemon" in cmdline(p)]  # noqa: E731
        assert wait_for(lambda: workers() or proc.poll() is not None, seconds=180)
        assert proc.poll() is None, proc.communicate()  # the rebuild's job is running
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert one_clean_line(err) == "cablestore demo: interrupted"
    assert "rebuild verify (spark engine)..." in out and "consistent" not in out.split("rebuild verify (spark engine)...", 1)[1]


def run_on_terminal(args, env, timeout=240) -> tuple[int, str]:
    """Run ``python -m cablestore ARGS`` with stdout and stderr on a pseudo-terminal (the progress line is drawn); its exit status and all it wrote."""
    import pty
    import select

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "cablestore", *args], env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child's side of the terminal is closed
                break
            if not data:
                break
            out += data
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return proc.returncode, out.decode("utf-8", "replace")


def test_no_third_party_warning_reaches_the_terminal_with_pandas_3_installed(tmp_path, small_store):
    """pyspark's FutureWarning about pandas 3 goes to the Spark log, not through the progress line."""
    import pandas

    assert int(pandas.__version__.split(".")[0]) >= 3  # the test extras install pandas 3, which pyspark warns about
    env = bare_env(tmp_path)
    env.pop("PYTHONWARNINGS", None)
    log = tmp_path / "spark.log"  # a new file: --spark-log creates it
    status, seen = run_on_terminal(["rebuild", str(small_store), "--partitions", "4", "--spark-log", str(log)], env)
    assert status == 0, seen
    assert "\r\x1b[K" in seen  # the progress line was drawn (a terminal, no --quiet)
    assert "Warning" not in seen and "warn(" not in seen, seen
    assert seen.rstrip().endswith("result: consistent")
    assert "FutureWarning" in log.read_text()  # where it went instead (pyspark 4 on pandas 3: "does not yet fully support")
