"""What a new user reads when a store refuses a command: a read-only medium, a store another process holds.

Real CLI processes; a real read-only medium (tests/test_readonly.py's read-only bind mount, else immutable files).
"""

from __future__ import annotations

import subprocess
import sys

from cablestore import Store

from .test_readonly import made, read_only_medium  # noqa: F401  (made: a closed store with a channel)

CLI = [sys.executable, "-m", "cablestore"]


def cli(*args):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=120)


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


def test_a_write_refused_by_a_read_only_medium_says_nothing_happened_in_the_same_words_each(made, tmp_path):  # noqa: F811
    assert cli("keygen", tmp_path / "me.key").returncode == 0
    assert cli("generate", "--posts", "5", tmp_path / "w.posts").returncode == 0
    writes = [
        ("post", "--key", tmp_path / "me.key", "text", "general", "hi"), ("ingest", tmp_path / "w.posts"),
        ("recover",), ("reindex",), ("check", "--repair"), ("search", "--enable"),
    ]
    with read_only_medium(made, tmp_path) as ro:
        said = set()
        for command, *rest in writes:
            out = cli(command, ro, *rest)
            line = one_line(out.stderr)
            assert out.returncode == 2 and line.startswith(f"cablestore {command}: StoreIOError: "), (command, line)
            assert "nothing was changed" in line and "may not have completed" not in line and "retry" not in line, line
            said.add(line.split(": ", 1)[1])
        assert len(said) == 1 and said.pop().startswith(f"StoreIOError: {ro} cannot be written ("), said  # (the reason: the medium's)


def test_recover_on_a_store_another_process_holds_says_it_as_post_does(made, tmp_path):  # noqa: F811
    assert cli("keygen", tmp_path / "me.key").returncode == 0
    with Store(made):  # held by this process: LevelDB's lock
        said = {}
        for command, *rest in [("recover",), ("post", "--key", tmp_path / "me.key", "text", "general", "hi"), ("reindex",)]:
            out = cli(command, made, *rest)
            assert out.returncode == 2
            said[command] = one_line(out.stderr).split(": ", 1)[1]
    assert said["recover"] == said["post"] == said["reindex"] == f"StoreLockedError: {made} is open in another process or Store", said


def test_sync_exits_2_when_it_cannot_connect_or_handshake_and_1_when_it_began_but_is_incomplete(tmp_path):
    """Exit 2: a refused connection and a failed handshake alike (nothing synced, a configuration or connection failure); 1: incomplete."""
    import json
    import socket
    import time

    from .conftest import stop

    with socket.socket() as s:  # a port nothing listens on: the connection is refused
        s.bind(("127.0.0.1", 0))
        refused_port = s.getsockname()[1]
    for name in ("right", "wrong"):
        assert cli("cabal", "new", tmp_path / f"{name}.cabal").returncode == 0
    assert cli("init", tmp_path / "served.ldb").returncode == 0
    port_file = tmp_path / "port"
    serve = subprocess.Popen([*CLI, "serve", tmp_path / "served.ldb", "--listen", "127.0.0.1:0", "--cabal-key", tmp_path / "right.cabal",
                              "--port-file", port_file, "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            assert serve.poll() is None and time.monotonic() < deadline, serve.stderr.read() if serve.poll() is not None else "no port"
            time.sleep(0.05)
        address = f"127.0.0.1:{int(port_file.read_text())}"
        refused = cli("sync", tmp_path / "a.ldb", "--connect", f"127.0.0.1:{refused_port}", "--json")
        wrong = cli("sync", tmp_path / "b.ldb", "--connect", address, "--cabal-key", tmp_path / "wrong.cabal", "--json")
        plain = cli("sync", tmp_path / "c.ldb", "--connect", address, "--json")  # the listener requires a handshake
        cut = cli("sync", tmp_path / "d.ldb", "--connect", address, "--cabal-key", tmp_path / "right.cabal", "--timeout", "0.001", "--json")
    finally:
        assert stop(serve) == 0
    errors = {name: (out.returncode, json.loads(out.stdout)["error"]) for name, out in (("refused", refused), ("wrong", wrong), ("plain", plain))}
    assert errors == {"refused": (2, "TransportError"), "wrong": (2, "WrongCabalKeyError"), "plain": (2, "HandshakeRequiredError")}, errors
    assert cut.returncode == 1 and json.loads(cut.stdout)["complete"] is False, (cut.stdout, cut.stderr)
    help_text = cli("sync", "--help").stdout
    assert "1 incomplete" in help_text and "2 it could not sync at all" in " ".join(help_text.split())


def test_init_makes_an_empty_store_and_refuses_anything_else_unchanged(tmp_path):
    import json

    created = cli("init", tmp_path / "new.ldb", "--json")
    assert created.returncode == 0 and json.loads(created.stdout)["created"] is True, created.stderr
    with Store(tmp_path / "new.ldb", create=False, readonly=True) as s:
        assert s.stats().posts == 0
    (tmp_path / "empty").mkdir()
    said = cli("init", tmp_path / "empty")
    assert said.returncode == 0 and said.stdout.startswith(f"created an empty store at {tmp_path / 'empty'}\n"), said.stderr
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    (tmp_path / "file").write_text("x")
    for path, what in ((tmp_path / "new.ldb", "already a store"), (tmp_path / "notes", "a directory that is not empty"), (tmp_path / "file", "a file")):
        before = sorted(p.name for p in path.iterdir()) if path.is_dir() else path.read_text()
        out = cli("init", path)
        line = one_line(out.stderr)
        assert out.returncode == 2 and line.startswith(f"cablestore init: StoreExistsError: {path} is {what}; nothing was changed"), line
        assert (sorted(p.name for p in path.iterdir()) if path.is_dir() else path.read_text()) == before


def test_keygen_and_post_label_what_they_print_and_json_gives_the_machine_form(tmp_path):
    import json
    import re

    key, store = tmp_path / "me.key", tmp_path / "s.ldb"
    keygen = cli("keygen", key)
    assert re.fullmatch(rf"public key: ([0-9a-f]{{64}})\nsecret key written to {re.escape(str(key))} \(mode 0600\)[^\n]*\n", keygen.stdout), keygen.stdout
    public = keygen.stdout.split()[2]
    again = cli("keygen", tmp_path / "other.key", "--json")
    assert set(json.loads(again.stdout)) == {"public_key", "keyfile"}
    posted = cli("post", store, "--key", key, "text", "#general", "hello", "world")
    assert re.fullmatch(r"posted post/text ([0-9a-f]{64}) in #general\n", posted.stdout), posted.stdout
    h = posted.stdout.split()[2]
    named = cli("post", store, "--key", key, "name", "alice")
    assert re.fullmatch(r"posted post/info [0-9a-f]{64}\n", named.stdout), named.stdout
    deleted = cli("post", store, "--key", key, "delete", h)
    assert re.fullmatch(r"posted post/delete [0-9a-f]{64}, deleting 1 post\n", deleted.stdout), deleted.stdout
    machine = json.loads(cli("post", store, "--key", key, "--json", "text", "general", "again").stdout)
    assert machine["author"] == public and machine["type"] == "post/text" and machine["text"] == "again"
