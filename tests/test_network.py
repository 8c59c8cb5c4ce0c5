"""A peer in a network: `serve --peer` keeps a two-way connection to each peer it is given and reconnects by itself;
posts and moderation travel across a line of real `serve` processes on loopback; the dialer's backoff is bounded."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cablestore import Store
from cablestore.errors import ArgumentError
from cablestore.peer import Backoff, Peer

from .conftest import stop

CLI = [sys.executable, "-m", "cablestore"]
CONVERGE_S = 20.0


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=60)


class Line:
    """N stores in a line, each served by a `serve` that dials the one before it; all share one local user."""

    def __init__(self, tmp_path: Path, n: int) -> None:
        self.tmp = tmp_path
        self.key = tmp_path / "admin.key"
        made = cli("keygen", self.key, "--json")
        assert made.returncode == 0
        self.admin = json.loads(made.stdout)["public_key"]  # every store's local user: moderation is resolved the same everywhere
        self.stores = [tmp_path / f"n{i}.ldb" for i in range(n)]
        self.ports: list[int] = [0] * n
        self.procs: list[subprocess.Popen | None] = [None] * n
        for s in self.stores:  # each store exists before serve (and has the same local user: the admin's key)
            assert cli("post", s, "--key", self.key, "join", "general").returncode == 0
        for i in range(n):
            self.start(i)

    def start(self, i: int) -> None:
        port_file = self.tmp / f"port{i}"
        port_file.unlink(missing_ok=True)
        peers = ["--peer", f"127.0.0.1:{self.ports[i - 1]}"] if i > 0 else []
        proc = subprocess.Popen([*CLI, "serve", self.stores[i], "--listen", f"127.0.0.1:{self.ports[i]}", "--port-file", port_file, "--quiet",
                                 "--local-user", self.admin, *peers],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() is not None else "no port"
            time.sleep(0.05)
        self.ports[i] = int(port_file.read_text())
        self.procs[i] = proc

    def post(self, i: int, text: str) -> str:
        done = cli("post", self.stores[i], "--key", self.key, "--json", "text", "general", text)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["hash"]

    def texts(self, i: int) -> set[str]:
        shown = cli("show", self.stores[i], "general", "--json")
        assert shown.returncode == 0, shown.stderr
        return {m.get("text") for m in json.loads(shown.stdout)["messages"] if m.get("text")}

    def wait_for(self, texts: set[str], seconds: float = CONVERGE_S) -> float:
        start = time.monotonic()
        while True:
            missing = {i: texts - self.texts(i) for i in range(len(self.stores))}
            if not any(missing.values()):
                return time.monotonic() - start
            assert time.monotonic() - start < seconds, f"not every peer holds every post after {seconds} s: {missing}"
            time.sleep(0.3)

    def close(self) -> None:
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                stop(proc)


@pytest.fixture
def line4(tmp_path):
    net = Line(tmp_path, 4)
    try:
        yield net
    finally:
        net.close()


def test_a_post_at_either_end_of_a_line_reaches_every_peer(line4):
    line4.post(0, "from the first")
    line4.post(3, "from the last")
    line4.wait_for({"from the first", "from the last"})


def test_a_killed_middle_peer_restarted_on_its_port_is_rejoined_by_its_neighbours_by_themselves(line4):
    line4.post(0, "before")
    line4.wait_for({"before"})
    line4.procs[1].kill()  # SIGKILL: no goodbye
    line4.procs[1].wait()
    line4.post(0, "while apart, at the start")
    line4.post(3, "while apart, at the end")
    time.sleep(1.0)  # the neighbours notice and back off
    line4.start(1)  # on its old port: peer 2 dials it again by itself
    line4.wait_for({"before", "while apart, at the start", "while apart, at the end"})


def test_a_block_written_at_one_end_is_applied_the_same_at_the_other(line4, tmp_path):
    spam = tmp_path / "spam.key"
    assert cli("keygen", spam).returncode == 0
    assert cli("post", line4.stores[3], "--key", spam, "text", "general", "buy now").returncode == 0
    line4.wait_for({"buy now"})
    shown = json.loads(cli("show", line4.stores[0], "general", "--json").stdout)["messages"]
    author = next(m["author"] for m in shown if m.get("text") == "buy now")
    # notify=1: a notify=0 block never reaches a plain peer (moderation.md §5.1.4), so it could not travel here
    assert cli("block", line4.stores[0], "--key", line4.key, "--drop", "--notify", author).returncode == 0
    deadline = time.monotonic() + CONVERGE_S
    while any("buy now" in line4.texts(i) for i in range(4)):
        assert time.monotonic() < deadline, [line4.texts(i) for i in range(4)]
        time.sleep(0.3)
    states = [json.loads(cli("moderation", s, "--json").stdout) for s in line4.stores]
    assert all(st["blocks"] == states[0]["blocks"] and author in st["blocks"] for st in states)


def test_the_backoff_doubles_to_its_cap_with_jitter_and_resets_after_a_stable_connection():
    b = Backoff(base=0.5, cap=8.0, stable=10.0, random=random.Random(1))
    waits = [b.next_wait() for _ in range(8)]
    ceilings = [0.5, 1, 2, 4, 8, 8, 8, 8]
    assert all(c / 2 <= w <= c for w, c in zip(waits, ceilings, strict=True))
    b.connected_for(3.0)  # dropped early: still backing off
    assert b.next_wait() >= 4.0
    b.connected_for(12.0)
    assert b.next_wait() <= 0.5
    with pytest.raises(ArgumentError):
        Backoff(base=0)


def test_a_peer_that_is_down_costs_one_attempt_per_backoff_interval(tmp_path):
    async def run() -> dict:
        import socket

        with socket.socket() as probe:  # a port nothing listens on
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        with Store(tmp_path / "s") as store:
            async with Peer(store) as peer:
                live = await peer.connect("127.0.0.1", port, reconnect=True)  # returns at once, the peer being down
                await asyncio.sleep(3.0)
                return await live.close()

    counts = asyncio.run(run())
    # base 0.5 s doubling (each wait at least half its ceiling): 0 + >=0.25 + >=0.5 + >=1 + >=2 s: at most 5 attempts in 3 s
    assert 2 <= counts["dials"] <= 5 and counts["dials_failed"] == counts["dials"] and counts.get("dialled", 0) == 0
