"""When a command fails: one line naming the fault, one wording per fault whatever the command, the fix named, nothing created, changed or half-written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cablestore import Store
from cablestore.authoring.workload import generate, iter_posts, read_posts, write_posts
from cablestore.cli import main
from cablestore.errors import PostsFileError
from cablestore.progress import Progress

from .cli_helpers import files, home, one_line, peer  # noqa: F401  (fixtures)
from .conftest import NOW, dump, run_cli, stop

ZERO = "0" * 64

# --- a store that is not there: one wording, whatever the command -----------------------------

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
def test_every_command_names_a_missing_store_alike(peer, tmp_path, capsys, kind, expected):  # noqa: F811
    target = tmp_path / kind
    if kind == "empty":
        target.mkdir()
    elif kind == "file":
        target.write_bytes(b"x")
    before = files(tmp_path)
    for command in COMMANDS:
        argv = [a.format(s=target, key=peer / "me.key", out=tmp_path / "out") for a in command]
        code, out, err = run_cli(capsys, argv)
        assert code == 2, argv
        assert one_line(err) == f"cablestore {command[0]}: " + expected.format(s=target), argv
        assert files(tmp_path) == before, argv


@pytest.mark.parametrize("command", [["show", "{p}", "general"], ["stats", "{p}"], ["dump", "{p}"]])
@pytest.mark.parametrize("kind", ["missing", "empty dir", "file"])
def test_read_only_commands_create_nothing(tmp_path, capsys, command, kind):
    target = tmp_path / "target"
    if kind == "empty dir":
        target.mkdir()
    elif kind == "file":
        target.write_bytes(b"not a store")
    before = files(tmp_path)
    assert main([c.format(p=target) for c in command]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and {"missing": "does not exist", "empty dir": "empty directory", "file": "is a file"}[kind] in err
    assert files(tmp_path) == before


def test_read_only_commands_change_no_key(peer, capsys):  # noqa: F811
    with Store(peer / "peer.ldb") as s:
        before = list(s.items())
    for argv in (["show", "peer.ldb", "general"], ["stats", "peer.ldb"], ["dump", "peer.ldb"]):
        assert main([str(peer / a) if a == "peer.ldb" else a for a in argv]) == 0
    with Store(peer / "peer.ldb") as s:
        assert list(s.items()) == before


def test_a_missing_posts_file_and_an_os_error_are_one_plain_line(peer, tmp_path, capsys):  # noqa: F811
    code, _, err = run_cli(capsys, ["ingest", tmp_path / "s.ldb", tmp_path / "nosuch.bin"])
    assert code == 2 and one_line(err) == f"cablestore ingest: PostsFileError: {tmp_path / 'nosuch.bin'} does not exist"
    code, _, err = run_cli(capsys, ["ingest", tmp_path / "s.ldb", tmp_path])
    assert code == 2 and one_line(err).endswith(f"{tmp_path} is a directory, not a posts file")
    code, _, err = run_cli(capsys, ["generate", "--posts", "3", tmp_path / "no" / "dir" / "p.bin"])
    assert code == 2 and one_line(err) == f"cablestore generate: PostsFileError: cannot write {tmp_path / 'no' / 'dir' / 'p.bin'}: No such file or directory"
    (tmp_path / "afile").write_bytes(b"")
    code, _, err = run_cli(capsys, ["export", peer / "peer.ldb", tmp_path / "afile" / "snap", "--quiet"])
    assert code == 2 and "[Errno" not in err and one_line(err).startswith("cablestore export: NotADirectoryError: ")
    assert sorted(os.listdir(tmp_path)) == ["afile"]


def test_json_output_carries_the_error_class(peer, tmp_path, capsys):  # noqa: F811
    code, out, err = run_cli(capsys, ["stats", tmp_path / "nope", "--json"])
    assert code == 2 and one_line(err) == f"cablestore stats: StoreNotFoundError: {tmp_path / 'nope'} does not exist"
    assert json.loads(out) == {"error": "StoreNotFoundError", "message": f"{tmp_path / 'nope'} does not exist"}
    code, out, _ = run_cli(capsys, ["show", peer / "peer.ldb", "nosuch", "--json"])
    assert code == 2 and json.loads(out)["error"] == "ChannelNotFoundError"


# --- an unknown channel ------------------------------------------------------------------------


def test_show_unknown_channel_names_the_known_ones(peer, capsys):  # noqa: F811
    assert main(["show", str(peer / "peer.ldb"), "nowhere"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no channel 'nowhere'" in err and "general" in err


@pytest.mark.parametrize("argv", [["show", "{s}", "Nosuch"], ["heads", "{s}", "Nosuch"], ["dump", "{s}", "--channel", "Nosuch"]])
def test_commands_that_show_one_channel_refuse_an_unknown_one(peer, capsys, argv):  # noqa: F811
    with Store(peer / "peer.ldb") as s:
        before = dump(s)
    code, out, err = run_cli(capsys, [a.format(s=peer / "peer.ldb") for a in argv])
    line = one_line(err)
    assert code == 2 and out == ""
    assert line.startswith(f"cablestore {argv[0]}: ChannelNotFoundError: no channel 'Nosuch' in {peer / 'peer.ldb'} (channels: dev-talk, general")
    with Store(peer / "peer.ldb") as s:
        assert dump(s) == before


# --- the demo into an existing store -------------------------------------------------------------


def test_demo_refuses_an_existing_store(peer, capsys):  # noqa: F811
    with Store(peer / "peer.ldb") as s:
        before = dump(s)
    code, out, err = run_cli(capsys, ["demo", "--dir", peer / "peer.ldb", "--engine", "local", "--posts", "50"])
    assert code == 2 and out == ""
    assert one_line(err).startswith(f"cablestore demo: StoreExistsError: {peer / 'peer.ldb'} holds a store already")
    with Store(peer / "peer.ldb") as s:
        assert dump(s) == before


# --- messages that name the right fix ------------------------------------------------------------------


def _damaged(tmp_path):
    store = tmp_path / "s.ldb"
    with Store(store, now=lambda: NOW) as s:
        s.ingest_many(generate(seed=3, posts=200))
        key = next(k for k, _ in s.items(b"!chat!"))
        s.db.delete(key)
    return str(store)


@pytest.mark.parametrize(
    "argv, hint",
    [
        (["check", "{s}"], "cablestore check {s} --repair"),
        (["rebuild", "{s}", "--engine", "local"], "cablestore rebuild {s} --engine local --repair"),
        (["check", "{s}", "--partitions", "4"], "cablestore check {s} --repair"),
    ],
)
def test_check_calls_itself_check_and_its_hint_keeps_the_engine(tmp_path, capsys, argv, hint):
    store = _damaged(tmp_path)
    assert main([a.format(s=store) for a in argv]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"cablestore {argv[0]} --verify: {store} (local engine")
    assert f"run `{hint.format(s=store)}` to fix them" in out
    assert main([a.format(s=store) for a in argv] + ["--repair", "--quiet"]) == 0  # the hint's command works


def test_after_an_interrupted_reindex_check_says_to_run_reindex_again(tmp_path, capsys):
    from cablestore.rebuild.reindex import reindex

    class Interrupting(Progress):
        def advance(self, n: int = 1) -> None:
            raise KeyboardInterrupt  # Ctrl-C a thousand posts in

    path = tmp_path / "s.ldb"
    with Store(path) as s:
        s.ingest_many(generate(seed=6, posts=2500))
        with pytest.raises(KeyboardInterrupt):
            reindex(s, Interrupting(quiet=True))
    code, out, _ = run_cli(capsys, ["check", path])
    assert code == 1
    assert out.splitlines()[-1] == f"  result: DIFFERENCES FOUND; a reindex of this store was interrupted: run `cablestore reindex {path}` again to finish it"
    assert "--repair" not in out
    assert run_cli(capsys, ["reindex", path, "--quiet"])[0] == 0
    code, out, _ = run_cli(capsys, ["check", path, "--json"])
    assert code == 0 and json.loads(out)["reindex_interrupted"] is False


def test_a_file_that_is_not_a_key_is_called_so_not_sent_to_chmod(home, tmp_path, capsys):  # noqa: F811
    store = home / "one.ldb"
    (tmp_path / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (tmp_path / "passwd").chmod(0o644)
    code, _, err = run_cli(capsys, ["post", store, "--key", tmp_path / "passwd", "text", "general", "x"])
    assert code == 2 and "is not a cablestore key file" in err and "chmod" not in err
    (tmp_path / "open.key").write_bytes((home / "me.key").read_bytes())
    (tmp_path / "open.key").chmod(0o644)  # a real key others can read: then chmod is the fix
    code, _, err = run_cli(capsys, ["post", store, "--key", tmp_path / "open.key", "text", "general", "x"])
    assert code == 2 and err.rstrip().endswith(f"run: chmod 600 {tmp_path / 'open.key'}")


def test_a_snapshot_given_as_a_store_names_the_command_that_reads_it(home, tmp_path, capsys):  # noqa: F811
    assert run_cli(capsys, ["export", home / "one.ldb", tmp_path / "snap", "--quiet"])[0] == 0
    write_posts(tmp_path / "p.bin", generate(seed=1, posts=3))
    for argv in (["ingest", tmp_path / "snap", tmp_path / "p.bin"], ["show", tmp_path / "snap", "general"]):
        code, _, err = run_cli(capsys, argv)
        assert code == 2 and err.rstrip().endswith(f"(verify it with `cablestore check --snapshot {tmp_path / 'snap'}`)"), err


def test_the_cli_spells_library_errors_with_its_flags(tmp_path, capsys):
    """Library errors name no flag; the CLI line still shows the flag that acts on the error."""
    from cablestore.authoring.moderating import _needs_targets
    from cablestore.cli.args import error_message
    from cablestore.errors import CorruptRecordError
    from cablestore.keyspace.keys import unescape

    with pytest.raises(CorruptRecordError) as caught:
        unescape(b"no terminator")
    assert "--repair" not in str(caught.value)
    assert error_message(caught.value).endswith("; run `cablestore check STORE --repair`")
    assert error_message(_needs_targets("drop")) == "drop needs --post HASHes or --channel C"
    assert error_message(_needs_targets("hide")) == "hide needs --user PUBKEYs, --post HASHes"
    Store(tmp_path / "s").close()
    assert main(["rebuild", str(tmp_path / "s"), "--engine", "local", "--master", "local[1]"]) == 2
    err = capsys.readouterr().err
    assert err.strip().endswith("(--master with --engine local)"), err


# --- posts files ------------------------------------------------------------------


@pytest.mark.parametrize("stray", [b"\x01", b"\x01\x02", b"\x01\x02\x03"])
def test_stray_bytes_after_a_posts_file_are_a_posts_file_error(tmp_path, stray):
    path = tmp_path / "p.bin"
    write_posts(path, generate(seed=1, posts=10))
    path.write_bytes(path.read_bytes() + stray)
    with pytest.raises(PostsFileError, match=f"{len(stray)} stray byte"):
        read_posts(path)
    with pytest.raises(PostsFileError):
        list(iter_posts(path, 4))


def test_garbage_is_not_a_posts_file(tmp_path, capsys):
    path = tmp_path / "garbage.bin"
    path.write_bytes(os.urandom(5000).replace(b"\x00", b"\x01"))
    with pytest.raises(PostsFileError, match="is not a posts file"):
        read_posts(path)
    path.write_bytes(b"\x00\x00\x00\x05hello")  # a record too short to be any post
    with pytest.raises(PostsFileError, match="is not a posts file"):
        read_posts(path)
    assert main(["ingest", str(tmp_path / "s.ldb"), str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a posts file" in err
    assert not (tmp_path / "s.ldb").exists()


def test_truncated_posts_file_says_where(tmp_path):
    path = tmp_path / "p.bin"
    write_posts(path, generate(seed=1, posts=10))
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(PostsFileError, match="record 10 at byte .* truncated or damaged after 9 good records"):
        read_posts(path)


def test_iter_posts_refuses_batch_zero(tmp_path):
    path = tmp_path / "p.bin"
    write_posts(path, generate(seed=1, posts=3))
    with pytest.raises(PostsFileError):
        list(iter_posts(path, 0))
    assert [len(c) for c in iter_posts(path, 2)] == [2, 1]


# --- generate, interrupted: no file, no partial file ----------------------------------------------


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


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_generate_stopped_by_a_signal_leaves_no_partial_file(tmp_path, signum):
    proc = subprocess.Popen(
        [sys.executable, "-m", "cablestore", "generate", "--posts", "100000000", "--quiet", str(tmp_path / "x.bin")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    partial = tmp_path / f".x.bin.{proc.pid}.partial"
    deadline = time.monotonic() + 60
    while not (partial.exists() and partial.stat().st_size > 0) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert partial.exists() and proc.poll() is None, proc.poll()  # it is writing
    assert stop(proc, signum) == 130
    assert proc.stderr.read() == "cablestore generate: interrupted\n"
    assert os.listdir(tmp_path) == []
