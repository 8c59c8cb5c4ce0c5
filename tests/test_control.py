"""Commands on a served store run through `serve` (its control socket), with real processes."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time

import pytest

from cablestore.wire import messages as M
from cablestore.wire.decoding import Decoder

from .conftest import stop

CLI = [sys.executable, "-m", "cablestore"]


def cli(*args, cwd=None):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=60, cwd=cwd)


@pytest.fixture
def served(tmp_path):
    key = tmp_path / "me.key"
    store = tmp_path / "peer.ldb"
    assert cli("keygen", key).returncode == 0
    assert cli("post", store, "--key", key, "join", "general").returncode == 0
    port_file = tmp_path / "port"
    proc = subprocess.Popen([*CLI, "serve", store, "--listen", "127.0.0.1:0", "--port-file", port_file, "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() is not None else "no port"
            time.sleep(0.05)
        yield store, key, int(port_file.read_text()), proc
    finally:
        if proc.poll() is None:
            stop(proc)


def test_read_and_post_commands_run_through_serve_with_the_same_output(served, tmp_path):
    store, key, port, proc = served
    sock = store / "cablestore.sock"
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600 and stat.S_ISSOCK(os.stat(sock).st_mode)
    posted = cli("post", store.name, "--key", key.name, "text", "general", "through serve", cwd=tmp_path)  # relative paths: the client's
    assert posted.returncode == 0 and posted.stdout.startswith("posted post/text ") and posted.stdout.endswith(" in #general\n"), posted.stderr
    commands = [
        ("show", store, "general", "--json"), ("show", store, "general"), ("channels", store), ("stats", store, "--json"),
        ("heads", store, "general"), ("dump", store, "--limit", "2"), ("roles", store), ("moderation", store, "--json"),
        ("check", store, "--json", "--quiet"),
    ]
    through = {c: cli(*c) for c in commands}
    missing = cli("show", store, "nosuch")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "ChannelNotFoundError" in missing.stderr
    assert "Traceback" not in missing.stderr
    assert through[commands[0]].returncode == 0 and "through serve" in through[commands[0]].stdout
    assert stop(proc) == 0
    assert not sock.exists()  # removed on exit
    for c, got in through.items():  # now without serve: the same output and status
        direct = cli(*c)
        if c[0] == "stats":  # the bytes on disk change when LevelDB closes (its log compacted): the rest is equal
            got.stdout, direct.stdout = ({k: v for k, v in json.loads(o).items() if k != "bytes_on_disk"} for o in (got.stdout, direct.stdout))
        if c[0] == "check":  # its report carries how long each phase took: the rest is equal
            got.stdout, direct.stdout = ({k: v for k, v in json.loads(o).items() if k != "seconds"} for o in (got.stdout, direct.stdout))
        assert (got.returncode, got.stdout) == (direct.returncode, direct.stdout), c
        assert got.returncode in (0,), (c, got.stderr)


def test_a_post_through_serve_reaches_a_connected_peers_live_request_at_once(served):
    store, key, port, proc = served
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        rid = b"\x00\x00\x00\x2a"
        s.sendall(M.encode(M.TimeRangeRequest(rid, "general", 0, 0, 0)))
        posted = cli("post", store, "--key", key, "--json", "text", "general", "live")
        assert posted.returncode == 0, posted.stderr
        want = bytes.fromhex(json.loads(posted.stdout)["hash"])
        decoder, got = Decoder(), set()
        deadline = time.monotonic() + 10
        while want not in got and time.monotonic() < deadline:
            data = s.recv(65536)
            assert data, "serve closed the connection"
            for m in decoder.feed(data):
                if isinstance(m, M.HashResponse) and m.req_id == rid:
                    got.update(m.hashes)
        assert want in got


def test_a_store_locked_without_serve_still_fails_in_one_line(tmp_path):
    store = tmp_path / "s.ldb"
    assert cli("keygen", tmp_path / "k").returncode == 0
    assert cli("post", store, "--key", tmp_path / "k", "join", "general").returncode == 0
    holder = subprocess.Popen([sys.executable, "-c", f"import sys, cablestore; s = cablestore.Store({str(store)!r}); print('ok', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ok"
        out = cli("show", store, "general")
        assert out.returncode == 2 and "StoreLockedError" in out.stderr and out.stderr.count("\n") == 1
    finally:
        stop(holder)


def test_a_stale_socket_of_a_killed_serve_is_ignored_and_replaced(served):
    import signal

    store, key, port, proc = served
    assert stop(proc, signal.SIGKILL) == -signal.SIGKILL
    assert (store / "cablestore.sock").exists()  # left behind
    shown = cli("show", store, "general", "--json")  # the lock went with the process: opened directly
    assert shown.returncode == 0 and json.loads(shown.stdout)["members"] == 1
    check = cli("check", store, "--quiet")
    assert check.returncode == 0, check.stdout + check.stderr


def test_repair_is_refused_while_served(served):
    store, *_ = served
    out = cli("check", store, "--repair")
    assert out.returncode == 2 and "stop serve first" in out.stderr


def test_a_served_store_without_a_local_user_takes_the_first_moderators_key_once(served, tmp_path):
    """`serve` without --local-user: the first moderation command run through it sets the local user, as the CLI
    does on a store it opens; another key is then refused in one line, and the served store keeps the first."""
    store, key, port, proc = served
    me = json.loads(cli("keygen", tmp_path / "mod.key", "--json").stdout)["public_key"]
    other = tmp_path / "other.key"
    assert cli("keygen", other).returncode == 0
    troll = "ab" * 32
    hidden = cli("hide", store, "--key", tmp_path / "mod.key", "--user", troll)
    assert hidden.returncode == 0, hidden.stderr
    state = json.loads(cli("moderation", store, "--json").stdout)
    assert state["local_user"] == me and troll in state["hidden_users"]["(cabal)"]
    again = cli("block", store, "--key", tmp_path / "mod.key", troll)  # the same key: no change
    assert again.returncode == 0, again.stderr
    refused = cli("hide", store, "--key", other, "--user", troll)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "LocalUserError" in refused.stderr and f"belongs to local user {me}" in refused.stderr
    assert stop(proc) == 0
    from cablestore import Store

    with Store(store) as s:
        assert s.local_user.hex() == me and set(s.blocks()) == {bytes.fromhex(troll)}
