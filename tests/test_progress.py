"""Progress on long work: ``check``, ``rebuild`` (both engines) and ``reindex`` draw counts and a rate on a terminal.

Each command runs as a real process on a real pseudo-terminal (:mod:`pty`);
with ``--quiet``, or when its output is piped, it draws nothing.
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

from cablestore import Store
from cablestore.authoring.workload import generate

CLI = [sys.executable, "-m", "cablestore"]
POSTS = 3000
RATE = re.compile(r" \d[\d,]*/s")


def on_a_terminal(*args, timeout: float = 300) -> tuple[int, str]:
    """Run ``cablestore ARGS`` with stdout and stderr on a new pseudo-terminal; return its status and everything it wrote."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([*CLI, *map(str, args)], stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the process closed the terminal
                    break
                if not data:
                    break
                out += data
            elif proc.poll() is not None:
                break
        return proc.wait(timeout=max(1, deadline - time.monotonic())), out.decode("utf-8", "replace")
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def drawn(out: str, label: str) -> list[str]:
    """What each redraw of stage ``label`` showed after the label (a redraw starts with a carriage return and an erase)."""
    return [part.split("\r\n")[0][len(label) + 2 :] for part in out.split("\r\033[K")[1:] if part.startswith(f"{label}: ")]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    path = tmp_path_factory.mktemp("progress") / "store"
    with Store(path) as s:
        s.ingest_many(generate(seed=3, posts=POSTS))
        return path, s.stats().posts


def test_check_draws_its_count_its_total_and_a_rate(made):
    path, posts = made
    status, out = on_a_terminal("check", path)
    assert status == 0, out
    lines = drawn(out, "recompute views (local engine)")
    assert lines and re.search(rf"\] {posts}/{posts}{RATE.pattern}$", lines[-1]), lines[-1:]
    assert "result: consistent" in out


def test_reindex_draws_its_stages_with_counts_and_rates(made):
    path, posts = made
    status, out = on_a_terminal("reindex", path)
    assert status == 0, out
    indexed = drawn(out, "index posts")
    assert indexed and re.fullmatch(rf"{posts}{RATE.pattern}", indexed[-1]), indexed[-1:]
    dropped = drawn(out, "drop derived views")
    assert dropped and RATE.search(dropped[-1])


def test_rebuild_with_the_local_engine_draws_progress(made):
    path, posts = made
    status, out = on_a_terminal("rebuild", path, "--engine", "local")
    assert status == 0, out
    assert any(line.endswith(f"{posts}/{posts}") or f"{posts}/{posts} " in line for line in drawn(out, "recompute views (local engine)"))


@pytest.mark.spark
def test_rebuild_with_the_spark_engine_draws_its_export_and_its_tasks(made):
    path, posts = made
    status, out = on_a_terminal("rebuild", path, "--partitions", "2")
    assert status == 0, out
    exported = drawn(out, "export posts and tombstones for Spark")
    assert exported and re.search(r"\] (\d+)/\1 \d[\d,]*/s$", exported[-1]), exported[-1:]
    tasks = drawn(out, "recompute views (spark engine): tasks done")
    assert tasks and int(tasks[-1].split()[0]) > 0, tasks[-1:]
    assert "result: consistent" in out


@pytest.mark.parametrize("command", [("check",), ("reindex",), ("rebuild", "--engine", "local")])
def test_quiet_draws_nothing_on_a_terminal_and_a_pipe_never_gets_progress(made, command):
    path, _ = made
    status, out = on_a_terminal(command[0], path, *command[1:], "--quiet")
    assert status == 0 and "\033[K" not in out and "\r" not in out.replace("\r\n", "\n"), out  # no redraw
    assert out.startswith(f"cablestore {command[0]}" if command[0] != "reindex" else "reindexed ")  # the report alone
    piped = subprocess.run([*CLI, command[0], path, *command[1:]], capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0 and piped.stderr == "" and "\033[K" not in piped.stdout and "\r" not in piped.stdout, piped.stderr
