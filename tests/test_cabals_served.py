"""`serve --cabal STORE=KEYFILE ...`: each cabal's store takes commands through serve (its own control socket), with real processes."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from .conftest import stop

CLI = [sys.executable, "-m", "cablestore"]


def cli(*args, cwd=None):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=60, cwd=cwd)


def test_each_cabals_store_runs_commands_through_the_many_cabal_serve(tmp_path):
    me = tmp_path / "me.key"
    assert cli("keygen", me).returncode == 0
    stores, keys = [tmp_path / "a.ldb", tmp_path / "b.ldb"], [tmp_path / "a.cabal", tmp_path / "b.cabal"]
    for store, key, word in zip(stores, keys, ("alpha", "beta"), strict=True):
        assert cli("cabal", "new", key).returncode == 0
        assert cli("post", store, "--key", me, "text", "general", f"{word} before").returncode == 0
    port_file = tmp_path / "port"
    proc = subprocess.Popen([*CLI, "serve", "--listen", "127.0.0.1:0", "--cabal", f"{stores[0]}={keys[0]}", "--cabal", f"{stores[1]}={keys[1]}",
                             "--port-file", port_file, "--quiet", "--no-pull"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() is not None else "no port"
            time.sleep(0.05)
        port = int(port_file.read_text())
        assert all((s / "cablestore.sock").exists() for s in stores)
        posted = cli("post", stores[0].name, "--key", me.name, "--json", "text", "general", "alpha through serve", cwd=tmp_path)  # the store is locked: run in serve
        shown = [json.loads(cli("show", s, "general", "--json").stdout) for s in stores]
        synced = cli("sync", tmp_path / "member.ldb", "--connect", f"127.0.0.1:{port}", "--cabal-key", keys[0], "--json")
        stats = cli("stats", stores[1], "--json")
    finally:
        status = stop(proc)
    assert posted.returncode == 0 and len(json.loads(posted.stdout)["hash"]) == 64, posted.stderr
    texts = [sorted(p["text"] for p in page["messages"]) for page in shown]
    assert texts == [["alpha before", "alpha through serve"], ["beta before"]]  # each command ran on its own store
    assert synced.returncode == 0 and json.loads(synced.stdout)["complete"], synced.stderr
    assert stats.returncode == 0 and json.loads(stats.stdout)["posts"] == 1, stats.stderr
    member = json.loads(cli("show", tmp_path / "member.ldb", "general", "--json").stdout)
    assert sorted(p["text"] for p in member["messages"]) == ["alpha before", "alpha through serve"]  # the post through serve is served to the cabal
    assert status == 0 and not any((s / "cablestore.sock").exists() for s in stores)
