"""The command line's first hour (issue 21, section 3): one line per fault, one wording per fault, nothing created or changed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import unicodedata

import pytest

from cablestore import JOIN, TEXT, TOPIC, Store, make_post, post_hash
from cablestore.authoring.workload import generate, read_posts, write_posts
from cablestore.cli import main

from .conftest import NOW, dump, keypair, run_cli, stop

ZERO = "0" * 64


@pytest.fixture(scope="module")
def peer(tmp_path_factory):
    """A store of 400 generated posts, and a key file."""
    d = tmp_path_factory.mktemp("usability")
    with Store(d / "peer.ldb") as s:
        s.ingest_many(generate(seed=4, posts=400))
    assert main(["keygen", str(d / "me.key")]) == 0
    return d




def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and err.endswith("\n") and "Traceback" not in err, err
    return err[:-1]


def _files(path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


# --- numbers beyond any count ---------------------------------------------------------


def test_show_with_a_limit_beyond_any_count_shows_all(peer, capsys):
    code, out, err = run_cli(capsys, ["show", peer / "peer.ldb", "general", "--limit", "99999999999999999999999"])
    assert code == 0 and err == ""
    with Store(peer / "peer.ldb") as s:
        total = len(s.channel_time_range("general"))
    assert f"{total} messages (all {total}, oldest first, times in UTC)" in out.splitlines()[0]
    assert len(out.splitlines()) == total + 1


# --- one wording per fault, no matter the command ---------------------------------------------

COMMANDS = [
    ["show", "{s}", "general"],
    ["channels", "{s}"],
    ["stats", "{s}"],
    ["dump", "{s}"],
    ["heads", "{s}", "general"],
    ["post", "{s}", "--key", "{key}", "delete", ZERO],
    ["reindex", "{s}"],
    ["recover", "{s}"],
    ["check", "{s}"],
    ["export", "{s}", "{out}"],
    ["rebuild", "{s}", "--engine", "local"],
]


@pytest.mark.parametrize("kind, expected", [
    ("missing", "StoreNotFoundError: {s} does not exist"),
    ("empty", "StoreNotFoundError: {s} is an empty directory, not a store"),
    ("file", "NotAStoreError: {s} is a file, not a store directory"),
])
def test_every_command_names_a_missing_store_alike(peer, tmp_path, capsys, kind, expected):
    target = tmp_path / kind
    if kind == "empty":
        target.mkdir()
    elif kind == "file":
        target.write_bytes(b"x")
    before = _files(tmp_path)
    for command in COMMANDS:
        argv = [a.format(s=target, key=peer / "me.key", out=tmp_path / "out") for a in command]
        code, out, err = run_cli(capsys, argv)
        assert code == 2, argv
        assert _one_line(err) == f"cablestore {command[0]}: " + expected.format(s=target), argv
        assert _files(tmp_path) == before, argv


def test_a_missing_posts_file_and_an_os_error_are_one_plain_line(peer, tmp_path, capsys):
    code, _, err = run_cli(capsys, ["ingest", tmp_path / "s.ldb", tmp_path / "nosuch.bin"])
    assert code == 2 and _one_line(err) == f"cablestore ingest: PostsFileError: {tmp_path / 'nosuch.bin'} does not exist"
    code, _, err = run_cli(capsys, ["ingest", tmp_path / "s.ldb", tmp_path])
    assert code == 2 and _one_line(err).endswith(f"{tmp_path} is a directory, not a posts file")
    code, _, err = run_cli(capsys, ["generate", "--posts", "3", tmp_path / "no" / "dir" / "p.bin"])
    assert code == 2 and _one_line(err) == f"cablestore generate: PostsFileError: cannot write {tmp_path / 'no' / 'dir' / 'p.bin'}: No such file or directory"
    (tmp_path / "afile").write_bytes(b"")
    code, _, err = run_cli(capsys, ["export", peer / "peer.ldb", tmp_path / "afile" / "snap", "--quiet"])
    assert code == 2 and "[Errno" not in err and _one_line(err).startswith("cablestore export: NotADirectoryError: ")
    assert sorted(os.listdir(tmp_path)) == ["afile"]


def test_json_output_carries_the_error_class(peer, tmp_path, capsys):
    code, out, err = run_cli(capsys, ["stats", tmp_path / "nope", "--json"])
    assert code == 2 and _one_line(err) == f"cablestore stats: StoreNotFoundError: {tmp_path / 'nope'} does not exist"
    assert json.loads(out) == {"error": "StoreNotFoundError", "message": f"{tmp_path / 'nope'} does not exist"}
    code, out, _ = run_cli(capsys, ["show", peer / "peer.ldb", "nosuch", "--json"])
    assert code == 2 and json.loads(out)["error"] == "ChannelNotFoundError"


# --- an unknown channel ------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["show", "{s}", "Nosuch"], ["heads", "{s}", "Nosuch"], ["dump", "{s}", "--channel", "Nosuch"]])
def test_commands_that_show_one_channel_refuse_an_unknown_one(peer, capsys, argv):
    with Store(peer / "peer.ldb") as s:
        before = dump(s)
    code, out, err = run_cli(capsys, [a.format(s=peer / "peer.ldb") for a in argv])
    line = _one_line(err)
    assert code == 2 and out == ""
    assert line.startswith(f"cablestore {argv[0]}: ChannelNotFoundError: no channel 'Nosuch' in {peer / 'peer.ldb'} (channels: dev-talk, general")
    with Store(peer / "peer.ldb") as s:
        assert dump(s) == before


def test_a_known_channel_in_another_case_is_found(peer, capsys):
    assert run_cli(capsys, ["heads", peer / "peer.ldb", "GENERAL"])[0] == 0
    code, out, _ = run_cli(capsys, ["dump", peer / "peer.ldb", "--channel", "General", "--limit", "2"])
    assert code == 0 and len(out.splitlines()) == 2


# --- dump: --limit and --json ------------------------------------------------------------------


def test_dump_limit_and_json(peer, capsys):
    _, lines, _ = run_cli(capsys, ["dump", peer / "peer.ldb"])
    rows = [json.loads(line) for line in lines.splitlines()]
    code, out, _ = run_cli(capsys, ["dump", peer / "peer.ldb", "--limit", "5"])
    assert code == 0 and [json.loads(line) for line in out.splitlines()] == rows[:5]
    code, out, _ = run_cli(capsys, ["dump", peer / "peer.ldb", "--json"])
    doc = json.loads(out)
    assert code == 0 and doc["posts"] == rows and doc["count"] == len(rows) and doc["channel"] is None and doc["limit"] is None
    code, out, _ = run_cli(capsys, ["dump", peer / "peer.ldb", "--json", "--limit", "99999999999999999999999", "--channel", "general"])
    doc = json.loads(out)
    assert code == 0 and doc["count"] == len(doc["posts"]) > 0 and doc["channel"] == "general"
    code, out, _ = run_cli(capsys, ["dump", peer / "peer.ldb", "--json", "--limit", "3"])
    assert json.loads(out)["posts"] == rows[:3]


# --- channels ----------------------------------------------------------------------------------


def test_channels_lists_every_channel(peer, capsys):
    code, out, err = run_cli(capsys, ["channels", peer / "peer.ldb"])
    with Store(peer / "peer.ldb") as s:
        summaries = s.channels()
    lines = out.splitlines()
    assert code == 0 and err == "" and len(lines) == len(summaries) >= 3
    for line, c in zip(lines, summaries, strict=True):
        assert line.startswith(f"#{c.spelling} ") and f" {c.messages:,} messages " in line and f" {c.members} members " in line
        assert line.endswith(f"topic {c.topic!r}" if c.topic else "(no topic)")
    code, out, _ = run_cli(capsys, ["channels", peer / "peer.ldb", "--json"])
    assert json.loads(out) == {"store": str(peer / "peer.ldb"), "channels": [c.to_dict() for c in summaries]}


def test_channels_of_a_store_without_any(tmp_path, capsys):
    Store(tmp_path / "s").close()
    code, out, _ = run_cli(capsys, ["channels", tmp_path / "s"])
    assert code == 0 and out == f"no channels in {tmp_path / 's'}\n"


# --- post --json speaks as dump does -------------------------------------------------------------


def test_post_json_spells_the_post_as_dump_does(tmp_path, capsys):
    key = tmp_path / "me.key"
    assert main(["keygen", str(key)]) == 0
    store = tmp_path / "s.ldb"
    assert main(["post", str(store), "--key", str(key), "name", "alice"]) == 0
    code, out, _ = run_cli(capsys, ["post", store, "--key", key, "--json", "text", "general", "hello"])
    posted = json.loads(out)
    assert code == 0 and "public_key" not in posted and posted["author_name"] == "alice" and posted["text"] == "hello"
    _, lines, _ = run_cli(capsys, ["dump", store, "--channel", "general"])
    dumped = {json.loads(line)["hash"]: json.loads(line) for line in lines.splitlines()}
    assert dumped[posted["hash"]] == posted


# --- the demo into an existing store -------------------------------------------------------------


def test_demo_refuses_an_existing_store(peer, capsys):
    with Store(peer / "peer.ldb") as s:
        before = dump(s)
    code, out, err = run_cli(capsys, ["demo", "--dir", peer / "peer.ldb", "--engine", "local", "--posts", "50"])
    assert code == 2 and out == ""
    assert _one_line(err).startswith(f"cablestore demo: StoreExistsError: {peer / 'peer.ldb'} holds a store already")
    with Store(peer / "peer.ldb") as s:
        assert dump(s) == before


# --- generate, interrupted ------------------------------------------------------------------------


def test_ctrl_c_during_generate_leaves_no_file(tmp_path):
    out = tmp_path / "posts.bin"
    proc = subprocess.Popen([sys.executable, "-m", "cablestore", "generate", "--posts", "200000", str(out)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not any(p.name.endswith(".partial") and p.stat().st_size > 0 for p in tmp_path.iterdir()):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        code = stop(proc, signal.SIGINT)
    assert code == 130 and proc.stderr.read() == "cablestore generate: interrupted\n"
    assert list(tmp_path.iterdir()) == []


# --- names that would break a line ----------------------------------------------------------------

NASTY = ["new\nline", "tab\there", "nul\x00byte", "bidi\u202eevil", "iso\u2067late", "line\u2028sep"]


@pytest.fixture(scope="module")
def nasty(tmp_path_factory):
    """A store whose channels (valid by the spec: UTF-8) have names that would break one line of output."""
    path = tmp_path_factory.mktemp("nasty") / "s.ldb"
    alice = keypair("alice")
    bufs = []
    for i, name in enumerate(NASTY):
        bufs.append(make_post(alice, JOIN, NOW - 100 + 3 * i, channel=name)[0])
        bufs.append(make_post(alice, TOPIC, NOW - 99 + 3 * i, channel=name, topic=f"topic of {name}")[0])
        bufs.append(make_post(alice, TEXT, NOW - 98 + 3 * i, channel=name, text=f"text in {name}\nsecond line")[0])
    with Store(path, now=lambda: NOW) as s:
        assert all(r.ok for r in s.ingest_many(bufs))
    return path


def _safe(text: str) -> bool:
    """One line per line, nothing a terminal would reorder or hide."""
    return all(c.isprintable() or c in "\n\u200c\u200d" for c in text)


def test_names_that_would_break_a_line_are_escaped_in_every_output(nasty, capsys):
    code, out, err = run_cli(capsys, ["channels", nasty])
    assert code == 0 and err == "" and _safe(out) and len(out.splitlines()) == len(NASTY)
    assert "#new\\nline " in out and "#bidi\\u202eevil " in out and "#nul\\x00byte " in out
    for name in NASTY:
        code, out, err = run_cli(capsys, ["show", nasty, name])
        assert code == 0 and _safe(out) and len(out.splitlines()) == 2, name
        assert out.splitlines()[1].endswith("text in " + repr(name)[1:-1] + "\\nsecond line")
        code, out, _ = run_cli(capsys, ["dump", nasty, "--channel", name])
        assert code == 0 and _safe(out) and len(out.splitlines()) == 3
        assert {json.loads(line)["channel"] for line in out.splitlines()} == {name}
        code, out, _ = run_cli(capsys, ["show", nasty, name, "--json"])
        assert code == 0 and _safe(out) and json.loads(out)["messages"][0]["channel"] == name
    code, out, _ = run_cli(capsys, ["channels", nasty, "--json"])
    assert _safe(out) and [c["name"] for c in json.loads(out)["channels"]] == sorted(NASTY)


def test_a_name_never_breaks_the_error_line(nasty, capsys):
    code, out, err = run_cli(capsys, ["show", nasty, "no\nsuch\u202e"])
    line = _one_line(err)
    assert code == 2 and _safe(line) and "no channel 'no\\nsuch\\u202e'" in line and "bidi\\u202eevil" in line


def test_nfc_and_nfd_spellings_are_one_channel(tmp_path, capsys):
    nfc, nfd = unicodedata.normalize("NFC", "Ünïcode-café"), unicodedata.normalize("NFD", "ünïcode-CAFÉ")
    assert nfc != nfd and nfc.casefold() != nfd.casefold()
    alice, bob = keypair("alice"), keypair("bob")
    a = make_post(alice, TEXT, NOW - 10, channel=nfc, text="composed")[0]
    b = make_post(bob, TEXT, NOW - 5, channel=nfd, text="decomposed")[0]
    with Store(tmp_path / "s", now=lambda: NOW) as s:
        s.ingest_many([a, b])
        assert s.channel_list() == [unicodedata.normalize("NFC", "ünïcode-café")]
        assert s.channel_time_range(nfc) == s.channel_time_range(nfd) == [post_hash(b), post_hash(a)]
        assert s.check().consistent
    code, out, _ = run_cli(capsys, ["show", tmp_path / "s", nfd])
    assert code == 0 and out.splitlines()[1].endswith("composed") and out.splitlines()[2].endswith("decomposed")


def test_posts_file_of_nasty_names_round_trips(tmp_path):
    """A channel name is data: posts are refused for nothing the spec allows."""
    alice = keypair("alice")
    bufs = [make_post(alice, TEXT, NOW - i, channel=name, text="x")[0] for i, name in enumerate(NASTY)]
    write_posts(tmp_path / "p.bin", bufs)
    assert read_posts(tmp_path / "p.bin") == bufs
