"""`cablestore keygen`, `post` and `heads` end to end; key files on disk."""

from __future__ import annotations

import json
import os
import stat

import pytest

from cablestore import Store, decode_post, verify_post
from cablestore.authoring.keyfile import format_keyfile, parse_keyfile, read_keyfile, write_keyfile
from cablestore.cli import main
from cablestore.errors import KeyFileError

from .conftest import dump, keypair


def _out(capsys) -> str:
    return capsys.readouterr().out.strip()


@pytest.fixture
def key(tmp_path, capsys):
    path = str(tmp_path / "me.key")
    assert main(["keygen", path]) == 0
    public, written = _out(capsys).splitlines()
    assert public == f"public key: {read_keyfile(path).public_key.hex()}" and written.startswith(f"secret key written to {path} (mode 0600)")
    return path


def test_keygen_writes_a_0600_file_and_never_overwrites(tmp_path, key, capsys):
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    before = open(key, "rb").read()
    assert main(["keygen", key]) == 2
    assert "already exists" in capsys.readouterr().err
    assert open(key, "rb").read() == before
    assert main(["keygen", str(tmp_path / "k2"), "--json"]) == 0
    assert len(json.loads(_out(capsys))["public_key"]) == 64


def test_every_post_kind_from_the_cli(tmp_path, key, capsys):
    store = str(tmp_path / "s")
    hashes = {}
    for argv in (["join", "dev"], ["text", "dev", "hello"], ["topic", "dev", "our topic"], ["name", "alice"], ["leave", "dev"]):
        assert main(["post", store, "--key", key, "--json", *argv]) == 0
        hashes[argv[0]] = json.loads(_out(capsys))["hash"]
    assert main(["heads", store, "dev"]) == 0
    assert _out(capsys) == hashes["leave"]
    assert main(["post", store, "--key", key, "--json", "delete", hashes["text"]]) == 0
    deleted = json.loads(_out(capsys))
    assert deleted["type"] == "post/delete" and deleted["deleted"] == [hashes["text"]] and deleted["links"] == []
    assert main(["post", store, "--key", key, "--json", "text", "dev", "again"]) == 0
    again = json.loads(_out(capsys))
    # the deleted text no longer links the join: the join is a head again, beside the leave
    assert again["links"] == sorted([hashes["join"], hashes["leave"]]) and again["text"] == "again"
    assert main(["heads", store, "DEV", "--json"]) == 0
    assert json.loads(_out(capsys)) == {"channel": "DEV", "heads": [again["hash"]]}
    with Store(store) as s:
        assert s.name(read_keyfile(key).public_key) == "alice" and s.topic("dev") == "our topic"
        assert s.get(hashes["text"]) is None
        for h in [*hashes.values(), again["hash"]]:
            buf = s.get(h)
            assert buf is None or (verify_post(buf) and decode_post(buf).public_key == read_keyfile(key).public_key)
        assert s.check().consistent


def test_cli_refusals_exit_2_and_change_nothing(tmp_path, key, capsys):
    store = str(tmp_path / "s")
    assert main(["post", store, "--key", key, "text", "dev", "hi"]) == 0
    mine = _out(capsys)
    other = str(tmp_path / "other.key")
    write_keyfile(other, keypair("bob"))
    with Store(store) as s:
        before = dump(s)
    for argv in (
        ["post", store, "--key", key, "text", "c" * 65, "x"],
        ["post", store, "--key", key, "name", "n" * 33],
        ["post", store, "--key", other, "delete", mine],
        ["post", store, "--key", key, "delete", "00" * 32],
        ["post", store, "--key", key, "delete", "not-hex"],
        ["post", store, "--key", str(tmp_path / "missing.key"), "join", "dev"],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("cablestore post: "), err
    with Store(store) as s:
        assert dump(s) == before


def test_read_only_and_refused_commands_create_nothing(tmp_path, key, capsys):
    assert main(["heads", str(tmp_path / "nope"), "dev"]) == 2
    assert main(["post", str(tmp_path / "nope2"), "--key", key, "delete", "00" * 32]) == 2
    assert main(["post", str(tmp_path / "nope3"), "--key", key, "text", "", "x"]) == 2
    assert sorted(os.listdir(tmp_path)) == ["me.key"]


def test_key_file_refusals(tmp_path):
    good = format_keyfile(keypair("alice"))
    assert parse_keyfile(good.encode()).public_key == keypair("alice").public_key
    cases = {
        "empty": "",
        "wrong format line": good.replace("cablestore-keypair 1", "cablestore-keypair 2"),
        "bad hex": good.replace("secret-seed ", "secret-seed zz"),
        "short seed": good.rsplit("\n", 2)[0] + "\nsecret-seed 00\n",
        "seed of someone else": good.replace(
            format_keyfile(keypair("alice")).splitlines()[3], format_keyfile(keypair("bob")).splitlines()[3]
        ),
        "extra line": good + "colour blue\n",
    }
    for name, text in cases.items():
        path = tmp_path / name.replace(" ", "_")
        path.write_text(text)
        path.chmod(0o600)
        with pytest.raises(KeyFileError):
            read_keyfile(path)
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff" * 10)
    binary.chmod(0o600)
    with pytest.raises(KeyFileError, match="not ASCII"):
        read_keyfile(binary)
    open_file = tmp_path / "open"
    write_keyfile(open_file, keypair("alice"))
    open_file.chmod(0o640)
    with pytest.raises(KeyFileError, match="chmod 600"):
        read_keyfile(open_file)
    with pytest.raises(KeyFileError, match="cannot read"):
        read_keyfile(tmp_path / "absent")
    with pytest.raises(KeyFileError, match="not a regular file"):
        read_keyfile(tmp_path)  # unreadable as a key: a directory
    big = tmp_path / "big"
    big.write_text(good + "#" * 5000)
    big.chmod(0o600)
    with pytest.raises(KeyFileError, match="larger"):
        read_keyfile(big)
