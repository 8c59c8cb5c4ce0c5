"""The rough edges a new user hit in a day with the command line (issue 36, item 2), each fixed and kept fixed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cablestore import Store
from cablestore.authoring.keyfile import read_keyfile
from cablestore.authoring.workload import generate, write_posts
from cablestore.cli import main
from cablestore.progress import Progress

from .conftest import run_cli, stop


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A store of one channel with one post by one member, written through the CLI, and its key file."""
    d = tmp_path_factory.mktemp("rough")
    assert main(["keygen", str(d / "me.key")]) == 0
    assert main(["post", str(d / "one.ldb"), "--key", str(d / "me.key"), "text", "general", "hello"]) == 0
    return d




# --- options anywhere after the subcommand ----------------------------------------------------


def test_posts_options_come_before_or_after_its_kind(home, capsys):
    key, store = home / "me.key", home / "one.ldb"
    code, out, err = run_cli(capsys, ["post", store, "text", "general", "hi", "--json", "--key", key])
    assert code == 0, err
    assert json.loads(out)["text"] == "hi"
    code, out, err = run_cli(capsys, ["post", store, "--key", key, "--json", "text", "general", "there"])  # before it, as always
    assert code == 0 and json.loads(out)["text"] == "there", err
    code, out, err = run_cli(capsys, ["post", store, "text", "general", "--key", key, "x"])  # between its arguments too
    assert code == 0 and len(out.strip()) == 64, err
    code, out, err = run_cli(capsys, ["post", store, "text", "general", "no key"])
    assert code == 2 and out == ""
    assert err == "cablestore post: ArgumentError: post needs --key KEYFILE: the key file of the post's author (see `cablestore keygen`)\n"
    me = read_keyfile(key).public_key
    fresh = home / "fresh.ldb"
    code, _, err = run_cli(capsys, ["post", fresh, "--local-user", me.hex(), "text", "general", "x", "--key", key])  # an option before the kind is kept
    assert code == 0, err
    with Store(fresh, readonly=True) as s:
        assert s.local_user == me


# --- #channel wherever a channel is -------------------------------------------------------------


def test_a_channel_is_accepted_as_channels_prints_it(home, capsys):
    store, key = home / "one.ldb", home / "me.key"
    code, out, _ = run_cli(capsys, ["channels", store])
    assert code == 0 and out.split()[0] == "#general"
    for argv in (["show", store, "{}"], ["heads", store, "{}"], ["dump", store, "--channel", "{}"], ["roles", store, "--channel", "{}"]):
        plain = run_cli(capsys, [str(a).replace("{}", "general") for a in argv])
        hashed = run_cli(capsys, [str(a).replace("{}", "#general") for a in argv])
        assert plain[0] == 0 and hashed == plain, argv
    code, out, err = run_cli(capsys, ["post", store, "--key", key, "join", "#general"])
    assert code == 0, err
    with Store(store, readonly=True) as s:
        assert s.channel_list() == ["general"]  # no channel named "#general" was made


# --- plural forms ----------------------------------------------------------------------------------


def test_one_of_anything_is_singular(tmp_path, home, capsys):
    from cablestore.progress import plural

    assert [plural(n, "post") for n in (0, 1, 2)] == ["0 posts", "1 post", "2 posts"]
    assert plural(1, "view entry", "view entries") == "1 view entry" and plural(1024, "post", spec=",") == "1,024 posts"
    store = home / "one.ldb"
    code, out, _ = run_cli(capsys, ["show", store, "general", "--limit", "1"])
    assert code == 0 and ", 1 member, " in out.splitlines()[0]
    code, out, _ = run_cli(capsys, ["users", store])
    assert out.splitlines()[0] == f"1 user in {store}"
    code, out, _ = run_cli(capsys, ["generate", "--posts", "1", tmp_path / "one.bin"])
    assert out == f"wrote 1 post (seed 1) to {tmp_path / 'one.bin'}\n"
    code, out, _ = run_cli(capsys, ["ingest", tmp_path / "fresh.ldb", tmp_path / "one.bin", "--quiet"])
    assert out.splitlines()[0] == f"read 1 post from 1 file into {tmp_path / 'fresh.ldb'}"
    assert run_cli(capsys, ["post", tmp_path / "chat.ldb", "text", "general", "hi", "--key", home / "me.key"])[0] == 0
    code, out, _ = run_cli(capsys, ["channels", tmp_path / "chat.ldb"])
    assert out == "#general       1 message      1 member   (no topic)\n"  # the columns of "2 messages", "2 members"


# --- bounds on counts ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, refusal",
    [
        (["generate", "--posts", "99999999999999999999", "out"], "argument --posts: must be from 1 to 100000000, got 99999999999999999999"),
        (["demo", "--posts", "100000001"], "argument --posts: must be from 1 to 100000000, got 100000001"),
        (["ingest", "s", "f", "--batch", "10000000"], "argument --batch: must be from 1 to 1000000, got 10000000"),
        (["ingest", "s", "f", "--workers", "257"], "argument --workers: must be from 0 to 256, got 257"),
        (["export", "s", "d", "--workers", "1000"], "argument --workers: must be from 0 to 256, got 1000"),
        (["serve", "s", "--listen", "127.0.0.1:0", "--max-connections", "1e9"], "argument --max-connections: expected an integer from 1 to 100000, got '1e9'"),
        (["sync", "s", "--connect", "127.0.0.1:1", "--memory-mb", "9" * 30], f"argument --memory-mb: must be from 1 to 1048576, got {'9' * 30}"),
    ],
)
def test_count_options_are_bounded_while_parsing(argv, refusal, tmp_path):
    done = subprocess.run([sys.executable, "-m", "cablestore", *argv], cwd=tmp_path, capture_output=True, text=True, timeout=60)  # unbounded: ran on
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines()[-1].endswith(refusal), done.stderr
    assert os.listdir(tmp_path) == []  # nothing was begun


# --- no partial file left by any signal -----------------------------------------------------------


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


# --- one meaning for --workers ----------------------------------------------------------------------


def test_workers_0_is_the_one_thread_mode(tmp_path, capsys):
    write_posts(tmp_path / "p.bin", generate(seed=2, posts=120))
    code, out, err = run_cli(capsys, ["ingest", tmp_path / "s.ldb", tmp_path / "p.bin", "--workers", "0", "--json"])
    assert code == 0, err
    assert json.loads(out)["new"] == 120
    code, out, err = run_cli(capsys, ["export", tmp_path / "s.ldb", tmp_path / "snap", "--workers", "0", "--json"])
    assert code == 0 and json.loads(out)["posts"] > 0, err
    assert "0 verifies in this one thread" in " ".join(_parse_help(capsys, ["ingest", "--help"]).split())


def _parse_help(capsys, argv) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(argv)
    return capsys.readouterr().out


# --- messages that name the right fix ------------------------------------------------------------------


def test_a_file_that_is_not_a_key_is_called_so_not_sent_to_chmod(home, tmp_path, capsys):
    store = home / "one.ldb"
    (tmp_path / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (tmp_path / "passwd").chmod(0o644)
    code, _, err = run_cli(capsys, ["post", store, "--key", tmp_path / "passwd", "text", "general", "x"])
    assert code == 2 and "is not a cablestore key file" in err and "chmod" not in err
    (tmp_path / "open.key").write_bytes((home / "me.key").read_bytes())
    (tmp_path / "open.key").chmod(0o644)  # a real key others can read: then chmod is the fix
    code, _, err = run_cli(capsys, ["post", store, "--key", tmp_path / "open.key", "text", "general", "x"])
    assert code == 2 and err.rstrip().endswith(f"run: chmod 600 {tmp_path / 'open.key'}")


def test_a_snapshot_given_as_a_store_names_the_command_that_reads_it(home, tmp_path, capsys):
    assert run_cli(capsys, ["export", home / "one.ldb", tmp_path / "snap", "--quiet"])[0] == 0
    write_posts(tmp_path / "p.bin", generate(seed=1, posts=3))
    for argv in (["ingest", tmp_path / "snap", tmp_path / "p.bin"], ["show", tmp_path / "snap", "general"]):
        code, _, err = run_cli(capsys, argv)
        assert code == 2 and err.rstrip().endswith(f"(verify it with `cablestore check --snapshot {tmp_path / 'snap'}`)"), err


def test_hides_user_metavar_is_not_the_key_files(capsys):
    usage = " ".join(_parse_help(capsys, ["hide", "--help"]).split())
    assert "--key KEYFILE" in usage and "--user PUBKEY [PUBKEY ...]" in usage


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
