"""`cablestore role/hide/unhide/drop/undrop/block/unblock`, `roles` and `moderation`, end to end through the CLI."""

from __future__ import annotations

import json

import pytest

from cablestore import Store, decode_post, post_hash, verify_post
from cablestore.cli import main

from .conftest import dump, keypair
from .moderation_helpers import text


def _out(capsys) -> str:
    return capsys.readouterr().out.strip()


@pytest.fixture
def keys(tmp_path, capsys):
    out = {}
    for name in ("me", "aleph", "eve"):
        path = str(tmp_path / f"{name}.key")
        assert main(["keygen", path, "--json"]) == 0
        out[name] = (path, json.loads(_out(capsys))["public_key"])
    return out


def test_every_moderation_command_writes_a_signed_post_and_the_state_follows(tmp_path, keys, capsys):
    store = str(tmp_path / "s.ldb")
    me, aleph, eve = keys["me"], keys["aleph"][1], keys["eve"][1]
    assert main(["role", store, "--key", me[0], aleph, "mod", "--channel", "dev", "--reason", "helps"]) == 0
    capsys.readouterr()
    assert main(["roles", store, "--channel", "DEV", "--json"]) == 0
    assert json.loads(_out(capsys))["roles"] == {aleph: "mod", me[1]: "admin"}
    assert main(["roles", store]) == 0
    assert aleph not in _out(capsys)  # a dev mod is no cabal mod

    assert main(["hide", store, "--key", me[0], "--user", eve, "--channel", "dev"]) == 0
    with Store(store) as s:
        chat = s.ingest(text(keypair("eve2"), 1_700_000_000_000, "dev", "hi")[0])
    capsys.readouterr()
    assert main(["hide", store, "--key", me[0], "--post", chat.hex(), "--reason", "rude", "--json"]) == 0
    hidden_post = json.loads(_out(capsys))
    assert hidden_post["action"] == "hide post" and hidden_post["channel"] == "dev" and hidden_post["reason"] == "rude"
    assert main(["drop", store, "--key", me[0], "--channel", "junk", "--yes"]) == 0
    assert main(["block", store, "--key", me[0], eve, "--drop", "--notify"]) == 0
    assert main(["unblock", store, "--key", me[0], eve, "--undrop"]) == 0
    assert main(["unhide", store, "--key", me[0], "--user", eve, "--channel", "dev", "--private"]) == 0
    capsys.readouterr()

    assert main(["moderation", store, "--json"]) == 0
    state = json.loads(_out(capsys))
    assert state["local_user"] == me[1]
    assert state["dropped_channels"].keys() == {"junk"} and state["hidden_posts"].keys() == {chat.hex()}
    assert state["hidden_users"]["dev"] == {} and state["unblocks"][eve]["undrop"] == 1 and state["blocks"] == {}
    assert state["moderation_posts"] == 7
    with Store(store) as s:
        for h in s.moderation_posts():
            buf = s.get(h)
            assert verify_post(buf) and decode_post(buf).public_key.hex() == me[1]
        assert s.check().consistent
        assert s.moderation_state(["dev"]) and all(s.post(h).privacy == 0 for h in s.moderation_state(["dev"]))


def test_the_key_owner_is_the_local_user_and_another_key_is_refused(tmp_path, keys, capsys):
    store = str(tmp_path / "s.ldb")
    assert main(["block", store, "--key", keys["me"][0], keys["eve"][1]]) == 0
    with Store(store) as s:
        before = dump(s)
    assert main(["block", store, "--key", keys["aleph"][0], keys["eve"][1]]) == 2
    assert "belongs to local user" in capsys.readouterr().err
    with Store(store) as s:
        assert dump(s) == before


@pytest.mark.parametrize(
    "argv",
    [
        ["role", "{s}", "--key", "{k}", "nothex", "admin"],
        ["hide", "{s}", "--key", "{k}"],  # nobody
        ["hide", "{s}", "--key", "{k}", "--user", "ab" * 32, "--post", "cd" * 32],  # both
        ["drop", "{s}", "--key", "{k}"],  # no posts, no channel
        ["block", "{s}", "--key", "{k}", "ab" * 32, "--reason", "x" * 129],
        ["block", "{s}", "--key", "{k}", "ab" * 32, "--channel", "dev"],  # blocks have no channel context
        ["unblock", "{s}", "--key", "{k}", "ab" * 32, "--channel", "dev"],
    ],
)
def test_refusals_exit_2_with_one_line_and_change_nothing(tmp_path, keys, capsys, argv):
    store = tmp_path / "s.ldb"
    assert main(["block", str(store), "--key", keys["me"][0], keys["eve"][1]]) == 0
    with Store(store) as s:
        before = dump(s)
    capsys.readouterr()
    assert main([a.format(s=store, k=keys["me"][0]) for a in argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    with Store(store) as s:
        assert dump(s) == before


def test_read_only_commands_create_nothing(tmp_path, capsys):
    for argv in (["roles", str(tmp_path / "none")], ["moderation", str(tmp_path / "none"), "--json"]):
        assert main(argv) == 2
    assert list(tmp_path.iterdir()) == []


def test_a_role_post_made_by_the_cli_is_what_the_author_api_makes(tmp_path, keys, capsys):
    store = str(tmp_path / "s.ldb")
    assert main(["role", store, "--key", keys["me"][0], keys["aleph"][1], "admin", "--json"]) == 0
    made = json.loads(_out(capsys))
    assert made["type"] == "post/role" and made["role"] == "admin" and made["channel"] == "" and made["links"] == []
    assert post_hash(bytes.fromhex(made["raw"])).hex() == made["hash"]


def test_show_leaves_hidden_messages_out_and_all_shows_them_marked(tmp_path, keys, capsys):
    store = str(tmp_path / "s.ldb")
    with Store(store) as s:
        s.ingest(text(keypair("eve"), 1_700_000_000_000, "dev", "visible")[0])
        rude = s.ingest(text(keypair("eve"), 1_700_000_000_001, "dev", "rude")[0])
    assert main(["hide", store, "--key", keys["me"][0], "--post", rude.hex()]) == 0
    capsys.readouterr()
    assert main(["show", store, "dev"]) == 0
    out = _out(capsys)
    assert "visible" in out and "rude" not in out
    assert main(["show", store, "dev", "--all"]) == 0
    assert "[hidden] rude" in _out(capsys)


def test_a_reason_deployed_peers_would_refuse_is_not_written(tmp_path, keys, capsys):
    """128 codepoints are valid (the spec); over 128 bytes cable.js 0.2.1 refuses them and cable-core.js dies (interop)."""
    store = str(tmp_path / "s.ldb")
    assert main(["block", store, "--key", keys["me"][0], keys["eve"][1], "--reason", "ü" * 64]) == 0  # 128 bytes
    assert main(["block", store, "--key", keys["me"][0], keys["eve"][1], "--reason", "ü" * 65]) == 2
    assert "cable.js 0.2.1" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["role", "{s}", "--key", "{k}", "zz", "admin"],  # not a key
        ["block", "{s}", "--key", "{k}", "ab" * 32, "--reason", "ü" * 65],  # over 128 bytes
        ["hide", "{s}", "--key", "{k}", "--user", *(f"{i:02x}" * 32 for i in range(17))],  # 17 recipients
        ["drop", "{s}", "--key", "{k}"],  # nothing to drop
        ["block", "{s}", "--key", "{k}", "ab" * 32, "--channel", "dev"],  # blocks have no channel context
    ],
)
def test_a_refused_moderation_command_creates_no_store_and_sets_no_local_user(tmp_path, keys, capsys, argv):
    fresh = tmp_path / "fresh.ldb"
    assert main([a.format(s=fresh, k=keys["me"][0]) for a in argv]) == 2
    assert not fresh.exists()
    plain = tmp_path / "plain.ldb"
    with Store(plain):
        pass
    assert main([a.format(s=plain, k=keys["me"][0]) for a in argv]) == 2
    with Store(plain) as s:
        assert s.local_user is None and len(s) == 0


@pytest.mark.parametrize("command", ["block", "unblock"])
def test_block_and_unblock_refuse_a_channel_saying_why(tmp_path, keys, capsys, command):
    assert main([command, str(tmp_path / "s.ldb"), "--key", keys["me"][0], keys["eve"][1], "--channel", "dev"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no channel" in err and "whole cabal" in err
    assert not (tmp_path / "s.ldb").exists()


def _channel_with_posts(tmp_path, keys):
    store = str(tmp_path / "s.ldb")
    for argv in (["join", "junk"], ["text", "junk", "one"], ["text", "junk", "two"]):
        assert main(["post", store, "--key", keys["aleph"][0], *argv]) == 0
    return store


def test_dropping_a_channel_off_a_terminal_needs_yes_and_says_how_many_posts_go(tmp_path, keys):
    import subprocess
    import sys

    store = _channel_with_posts(tmp_path, keys)
    refused = subprocess.run([sys.executable, "-m", "cablestore", "drop", store, "--key", keys["me"][0], "--channel", "junk"],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "removes its 3 posts" in refused.stderr and "--yes" in refused.stderr
    with Store(store) as s:
        assert s.channel_post_count("junk") == 3 and s.local_user is None
    done = subprocess.run([sys.executable, "-m", "cablestore", "drop", store, "--key", keys["me"][0], "--channel", "junk", "--yes"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with Store(store) as s:
        assert s.channel_post_count("junk") == 0 and "junk" in s.dropped_channels()


@pytest.mark.parametrize("answer, dropped", [(b"y\n", True), (b"\n", False)])
def test_dropping_a_channel_on_a_terminal_asks_first(tmp_path, keys, answer, dropped):
    import os
    import pty
    import select
    import subprocess
    import sys
    import time

    from .conftest import stop

    store = _channel_with_posts(tmp_path, keys)
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "cablestore", "drop", store, "--key", keys["me"][0], "--channel", "junk"],
                            stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 30
        while b"[y/N]" not in seen and time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                seen += os.read(master, 4096)
        assert b"removes its 3 posts" in seen and b"does not restore" in seen, seen
        os.write(master, answer)
        assert proc.wait(timeout=30) == (0 if dropped else 1)
    finally:
        if proc.poll() is None:
            stop(proc)
        os.close(master)
    with Store(store) as s:
        assert s.channel_post_count("junk") == (0 if dropped else 3)


def test_drop_help_says_undrop_does_not_restore(capsys):
    with pytest.raises(SystemExit):
        main(["drop", "--help"])
    assert "does not restore" in " ".join(capsys.readouterr().out.split())
