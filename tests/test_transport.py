"""Real TCP on 127.0.0.1: peers in one event loop, and `cablestore serve` / `sync` as processes."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time

import pytest

from cablestore import TEXT, Store
from cablestore.authoring.workload import generate, write_posts
from cablestore.errors import TransportError
from cablestore.peer import Node, PeerServer, run_server, run_sync

from .conftest import keypair, post, stop
from .peer_helpers import WALL, answers

PY = sys.executable


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


@pytest.fixture
def three(tmp_path):
    bufs = generate(seed=21, posts=1200)
    stores = {n: Store(tmp_path / n) for n in ("full", "part", "empty")}
    stores["full"].ingest_many(bufs)
    stores["part"].ingest_many(bufs[:700])
    yield stores
    for s in stores.values():
        s.close()


def test_three_peers_converge_over_tcp(three):
    async def main():
        servers = {n: await PeerServer(Node(s), "127.0.0.1", 0).start() for n, s in three.items()}
        try:
            for x, sx in three.items():
                for y, server in servers.items():
                    if x != y:
                        summary = await run_sync(sx, f"127.0.0.1:{server.port}", timeout=30)
                        assert summary["complete"], (x, y, summary)
        finally:
            for server in servers.values():
                await server.close()

    run(main())
    expected = answers(three["full"])
    assert answers(three["part"]) == expected
    assert answers(three["empty"]) == expected


def test_live_sync_over_tcp_receives_posts_written_later(three):
    full, empty = three["full"], three["empty"]

    async def main():
        server = await PeerServer(Node(full), "127.0.0.1", 0).start()
        stop = asyncio.Event()
        task = asyncio.create_task(run_sync(empty, f"127.0.0.1:{server.port}", channels=["general"], live=True, stop=stop))
        try:
            for _ in range(300):  # the finite pass, then the live requests
                await asyncio.sleep(0.05)
                if empty.channel_time_range("general") and len(server.node.requests) == 2:
                    break
            before = len(empty)
            h = full.ingest(post(keypair("zoe"), TEXT, WALL - 10, channel="general", text="live over tcp"))
            for _ in range(200):
                if h in empty:
                    break
                await asyncio.sleep(0.05)
            assert h in empty
        finally:
            stop.set()
            summary = await task
            await server.close()
        return summary, before

    summary, before = run(main())
    assert summary["channels"] == ["general"]
    # The live push counts in the summary like the finite pass (it did not before).
    assert summary["posts_ingested"] == summary["posts_requested"] == before + 1


def test_sync_to_a_closed_port_is_a_transport_error(tmp_path):
    with Store(tmp_path / "s") as store:
        with pytest.raises(TransportError):
            run(run_sync(store, "127.0.0.1:1"))
        with pytest.raises(TransportError):
            run(run_sync(store, "no-port-here"))


def test_a_peer_that_closes_its_side_while_being_pulled_from_is_closed_at_once(tmp_path):
    """A client that sends its FIN while `serve` pulls from it can answer nothing more: the server closes
    it at once (it held the connection, and the channels its pull was syncing, until the pull's 30 s
    progress timeout: every other peer's pull of those channels waited up to 10 s)."""

    async def main():
        with Store(tmp_path / "s") as store:
            store.ingest(post(keypair("zoe"), TEXT, WALL - 10, channel="general", text="held"))
            ports, stopping = [], asyncio.Event()
            serving = asyncio.create_task(run_server(store, "127.0.0.1:0", ready=lambda h, p: ports.append(p), stop=stopping, signals=False))
            try:
                for _ in range(1000):
                    if ports:
                        break
                    await asyncio.sleep(0.01)
                reader, writer = await asyncio.open_connection("127.0.0.1", ports[0])
                writer.write_eof()  # the client is done sending
                asked = await asyncio.wait_for(reader.read(), 10)  # the server's pull asks its channel list, then closes
                writer.close()
                assert asked, "the server asked nothing"
            finally:
                stopping.set()
                summary = await serving
            assert summary["closed"] == {"closed": 1}, summary

    run(main())


def _start_serve(store, *extra):
    proc = subprocess.Popen(
        [PY, "-m", "cablestore", "serve", str(store), "--listen", "127.0.0.1:0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert line.startswith("listening on 127.0.0.1:"), (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc, int(line.rsplit(":", 1)[1])


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_and_sync_processes_bring_an_empty_store_to_the_same_answers(tmp_path, sig):
    posts = tmp_path / "posts.bin"
    write_posts(posts, generate(seed=4, posts=800))
    subprocess.run([PY, "-m", "cablestore", "ingest", str(tmp_path / "full"), str(posts), "--quiet"], check=True, capture_output=True)
    proc, port = _start_serve(tmp_path / "full")
    try:
        out = subprocess.run(
            [PY, "-m", "cablestore", "sync", str(tmp_path / "empty"), "--connect", f"127.0.0.1:{port}", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        summary = json.loads(out.stdout)
        assert summary["complete"] and summary["posts_ingested"] > 500
        again = subprocess.run(
            [PY, "-m", "cablestore", "sync", str(tmp_path / "empty"), "--connect", f"127.0.0.1:{port}", "--channel", "general", "--quiet"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert again.returncode == 0 and "0 posts ingested" in again.stdout, again.stdout + again.stderr
    finally:
        assert stop(proc, sig) == 0
    with Store(tmp_path / "full") as full, Store(tmp_path / "empty") as empty:
        assert answers(empty) == answers(full)


@pytest.mark.parametrize("address", ["127.0.0.1:1", "no-port"])
def test_sync_command_errors_are_one_line_exit_2_and_create_no_store(tmp_path, address):
    out = subprocess.run([PY, "-m", "cablestore", "sync", str(tmp_path / "s"), "--connect", address], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "TransportError" in out.stderr
    assert not (tmp_path / "s").exists()  # an unreachable peer leaves no empty store behind


def test_serve_refuses_a_missing_store_without_creating_it(tmp_path):
    out = subprocess.run([PY, "-m", "cablestore", "serve", str(tmp_path / "nope"), "--listen", "127.0.0.1:0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert not (tmp_path / "nope").exists()


# --- sync and serve flags: refusals that name the fault -----------------------------------------------


@pytest.mark.parametrize("command", ["serve", "sync"])
def test_an_out_of_range_port_is_one_line_exit_2_and_creates_nothing(tmp_path, command):
    with Store(tmp_path / "full"):
        pass
    before = sorted(p.name for p in (tmp_path / "full").iterdir())
    store, flag = (tmp_path / "full", "--listen") if command == "serve" else (tmp_path / "new", "--connect")
    argv = [PY, "-m", "cablestore", command, str(store), flag, "127.0.0.1:99999"]
    if command == "serve":
        argv += ["--port-file", str(tmp_path / "port")]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "port must be" in out.stderr and "99999" in out.stderr
    assert not (tmp_path / "new").exists() and not (tmp_path / "port").exists()
    assert sorted(p.name for p in (tmp_path / "full").iterdir()) == before


def test_serve_json_is_json_lines_only_with_the_port_first_and_the_counts_last(tmp_path):
    posts = tmp_path / "posts.bin"
    write_posts(posts, generate(seed=4, posts=200))
    subprocess.run([PY, "-m", "cablestore", "ingest", str(tmp_path / "full"), str(posts), "--quiet"], check=True, capture_output=True)
    proc = subprocess.Popen(
        [PY, "-m", "cablestore", "serve", str(tmp_path / "full"), "--listen", "127.0.0.1:0", "--json", "--max-connections", "8"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        first = json.loads(proc.stdout.readline())
        assert first["listening"] == f"127.0.0.1:{first['port']}" and first["port"] > 0
        out = subprocess.run([PY, "-m", "cablestore", "sync", str(tmp_path / "copy"), "--connect", first["listening"], "--quiet"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
    finally:
        assert stop(proc) == 0
    rest = proc.stdout.read().splitlines()
    (last,) = rest  # nothing but JSON lines on stdout
    summary = json.loads(last)
    assert summary["listen"] == first["listening"]
    assert summary["connections"] == 1 and summary["closed"] == {"closed": 1} and summary["open_connections"] == 0


def test_serve_quiet_with_a_port_file_prints_nothing_and_the_port_can_be_learnt(tmp_path):
    with Store(tmp_path / "full"):
        pass
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [PY, "-m", "cablestore", "serve", str(tmp_path / "full"), "--listen", "127.0.0.1:0", "--quiet", "--port-file", str(port_file)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        for _ in range(200):
            if port_file.exists():
                break
            time.sleep(0.05)
        port = int(port_file.read_text())
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        assert stop(proc) == 0
    assert proc.stdout.read() == "" and not port_file.exists()  # removed on exit


def test_serve_help_shows_the_limits():
    out = subprocess.run([PY, "-m", "cablestore", "serve", "--help"], capture_output=True, text=True, timeout=60)
    for flag in ("--max-connections", "--memory-mb", "--max-live", "--idle-timeout", "--slow-timeout", "--request-timeout", "--port-file"):
        assert flag in out.stdout
    assert "connections at once; more are closed at once (default: 256)" in " ".join(out.stdout.split())


def test_a_sync_error_on_a_terminal_starts_on_its_own_line(tmp_path):
    """The progress line is ended before the error is printed (it was glued to it)."""
    import os
    import pty

    (tmp_path / "afile").write_text("not a store")
    listener = socket.create_server(("127.0.0.1", 0))
    master, slave = pty.openpty()
    try:
        proc = subprocess.run(
            [PY, "-m", "cablestore", "sync", str(tmp_path / "afile"), "--connect", f"127.0.0.1:{listener.getsockname()[1]}"],
            stdout=subprocess.PIPE, stderr=slave, text=True, timeout=60,
        )
        os.close(slave)
        shown = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(master)
        listener.close()
    text = shown.decode()
    assert proc.returncode == 2 and "sync: posts ingested" in text  # the progress line was drawn
    lines = text.replace("\r\n", "\n").split("\n")
    assert any(line.startswith("cablestore sync: ") for line in lines), text


def test_sync_of_a_channel_the_peer_does_not_list_fails_and_creates_nothing(tmp_path):
    """`sync --channel nosuch` must not report success and leave an empty store."""
    posts = tmp_path / "posts.bin"
    write_posts(posts, generate(seed=4, posts=100))
    subprocess.run([PY, "-m", "cablestore", "ingest", str(tmp_path / "full"), str(posts), "--quiet"], check=True, capture_output=True)
    proc, port = _start_serve(tmp_path / "full")
    try:
        out = subprocess.run([PY, "-m", "cablestore", "sync", str(tmp_path / "copy"), "--connect", f"127.0.0.1:{port}", "--channel", "nosuch"],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 1 and "the peer does not list 'nosuch'" in out.stdout, out.stdout + out.stderr
        assert not (tmp_path / "copy").exists()
        ok = subprocess.run([PY, "-m", "cablestore", "sync", str(tmp_path / "copy"), "--connect", f"127.0.0.1:{port}", "--channel", "GENERAL", "--quiet"],
                            capture_output=True, text=True, timeout=120)
        assert ok.returncode == 0 and (tmp_path / "copy").exists(), ok.stdout + ok.stderr
    finally:
        assert stop(proc) == 0
