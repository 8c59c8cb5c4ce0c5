"""The Spark engine as a user meets it from the command line: real JVM, real subprocesses, real signals.

Each test runs ``python -m cablestore`` with this interpreter but without an
activated virtualenv: PATH's ``python3`` is a script that fails, so a run
passes only if the executors use the driver's interpreter.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from cablestore import Store
from cablestore.workload import generate

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
    from cablestore.rebuild.spark import executor_python

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    assert executor_python("local[2]") == sys.executable
    assert executor_python("local") == sys.executable
    assert executor_python("spark://10.0.0.1:7077") == "python3"  # a cluster's nodes have their own paths
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python")
    assert executor_python("local[2]") == "/opt/py/bin/python"
