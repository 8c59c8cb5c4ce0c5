"""Shared fixtures: real LevelDB stores in temporary directories, real keys."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess

import pytest

from cablestore import Keypair, Store, make_post
from cablestore.keyspace.keys import CHECKED

NOW = 1_700_200_000_000  # a fixed "now" so timestamps never become "future"

# Spark's driver JVM, in this process (spark_session) and in the CLI processes tests start with this environment,
# compiles with C1 only: the tests' small jobs end before C2's compiling pays off, and JVM start plus the first
# job take about a third less. Only how fast the JVM runs changes; a PYSPARK_SUBMIT_ARGS of your own wins.
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--driver-java-options -XX:TieredStopAtLevel=1 pyspark-shell")


def keypair(name: str) -> Keypair:
    return Keypair.from_seed(hashlib.sha256(name.encode()).digest())


def post(kp: Keypair, post_type: int, ts: int, links=(), **body) -> bytes:
    buf, _ = make_post(kp, post_type, ts, links, **body)
    return buf


def dump(store: Store) -> list[tuple[bytes, bytes]]:
    """Every raw key/value pair but ``!local!checked`` (what a repairing check records it found): compared before and after to prove nothing changed."""
    return [(k, v) for k, v in store.items() if k != CHECKED]


@pytest.fixture
def alice():
    return keypair("alice")


@pytest.fixture
def bob():
    return keypair("bob")


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store", now=lambda: NOW) as s:
        yield s


@pytest.fixture
def stores(tmp_path):
    """``stores(name)`` opens a store under ``tmp_path`` (the wall clock); all are closed after the test."""
    opened = []

    def make(name):
        s = Store(tmp_path / name)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


@pytest.fixture(scope="session")
def spark_session():
    """One local[2] Spark session shared by every Spark test, stopped at the end."""
    from cablestore.rebuild.spark_engine import session

    spark = session("local[2]")
    yield spark
    spark.stop()


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
    """Send ``sig`` and return the exit status; a process that does not exit in time is killed (and the wait raises)."""
    proc.send_signal(sig)
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def run_cli(capsys, argv) -> tuple[int, str, str]:
    """Run the CLI in this process: (exit status, stdout, stderr) of ``argv`` alone."""
    from cablestore.cli import main

    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def cabals(tmp_path):
    """Three stores, one per private cabal, each with one post in a channel of its own (``secret-<i>``)."""
    from cablestore.authoring.author import Author

    stores = []
    for i in range(3):
        store = Store(tmp_path / f"cabal{i}")
        Author(store, Keypair()).text(f"secret-{i}", f"hello from cabal {i}")
        stores.append(store)
    yield stores
    for store in stores:
        store.close()
