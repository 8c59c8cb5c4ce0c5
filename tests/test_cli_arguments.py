"""How the command line reads its arguments: options anywhere after the subcommand, ``#channel``, checked and bounded numbers, help for every argument."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

import pytest

from cablestore import Store
from cablestore.authoring.keyfile import read_keyfile
from cablestore.authoring.workload import generate, write_posts
from cablestore.cli import build_parser, main

from .cli_helpers import home, parse_help, peer  # noqa: F401  (fixtures)
from .conftest import NOW, run_cli

# --- options anywhere after the subcommand ----------------------------------------------------


def test_posts_options_come_before_or_after_its_kind(home, capsys):  # noqa: F811
    key, store = home / "me.key", home / "one.ldb"
    code, out, err = run_cli(capsys, ["post", store, "text", "general", "hi", "--json", "--key", key])
    assert code == 0, err
    assert json.loads(out)["text"] == "hi"
    code, out, err = run_cli(capsys, ["post", store, "--key", key, "--json", "text", "general", "there"])  # before it, as always
    assert code == 0 and json.loads(out)["text"] == "there", err
    code, out, err = run_cli(capsys, ["post", store, "text", "general", "--key", key, "x"])  # between its arguments too
    assert code == 0 and re.fullmatch(r"posted post/text [0-9a-f]{64} in #general\n", out), (out, err)
    code, out, err = run_cli(capsys, ["post", store, "text", "general", "no key"])
    assert code == 2 and out == ""
    assert err == "cablestore post: ArgumentError: post needs --key KEYFILE: the key file of the post's author (see `cablestore keygen`)\n"
    me = read_keyfile(key).public_key
    fresh = home / "fresh.ldb"
    code, _, err = run_cli(capsys, ["post", fresh, "--local-user", me.hex(), "text", "general", "x", "--key", key])  # an option before the kind is kept
    assert code == 0, err
    with Store(fresh, readonly=True) as s:
        assert s.local_user == me


# --- channels: #channel, any case ----------------------------------------------------------------


def test_a_channel_is_accepted_as_channels_prints_it(home, capsys):  # noqa: F811
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


def test_a_known_channel_in_another_case_is_found(peer, capsys):  # noqa: F811
    assert run_cli(capsys, ["heads", peer / "peer.ldb", "GENERAL"])[0] == 0
    code, out, _ = run_cli(capsys, ["dump", peer / "peer.ldb", "--channel", "General", "--limit", "2"])
    assert code == 0 and len(out.splitlines()) == 2


# --- numbers: checked by the parser, bounded, a limit beyond any count means all ---------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["ingest", "s", "f", "--batch", "0"],
        ["ingest", "s", "f", "--workers", "257"],
        ["ingest", "s", "f", "--workers", "-2"],
        ["generate", "--posts", "0", "out"],
        ["generate", "--posts", "many", "out"],
        ["demo", "--posts", "-1"],
        ["export", "s", "d", "--partitions", "0"],
        ["export", "s", "d", "--partitions", "257"],
        ["check", "s", "--partitions", "0"],
        ["rebuild", "s", "--partitions", "x"],
        ["show", "s", "c", "--limit", "-1"],
    ],
)
def test_numeric_options_are_validated_by_the_parser(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "error: argument --" in err and "Traceback" not in err


def _all_actions(parser, prefix=""):
    """``(name, action)`` for every argument of every command, ``name`` prefixed with its commands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                yield from _all_actions(subparser, f"{prefix}{name} ")
        else:
            yield prefix + ("/".join(action.option_strings) or action.dest), action


def test_no_numeric_option_takes_an_unchecked_number():
    """Numbers go through a checking type (positive_int, ...), so 0 or -1 is a usage error, not a crash."""
    unchecked = [name for name, a in _all_actions(build_parser()) if a.type in (int, float) and not name.endswith("--seed")]
    assert unchecked == []


def test_positive_float_refuses_zero_negative_and_infinity():
    from cablestore.cli.args import positive_float

    assert positive_float("2.5") == 2.5
    for bad in ("0", "-1", "inf", "nan", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_float(bad)


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


def test_show_with_a_limit_beyond_any_count_shows_all(peer, capsys):  # noqa: F811
    code, out, err = run_cli(capsys, ["show", peer / "peer.ldb", "general", "--limit", "99999999999999999999999"])
    assert code == 0 and err == ""
    with Store(peer / "peer.ldb") as s:
        total = len(s.channel_time_range("general"))
    assert f"{total} messages (all {total}, oldest first, times in UTC)" in out.splitlines()[0]
    assert len(out.splitlines()) == total + 1


@pytest.mark.parametrize("partitions", [0, -1, 257, "4"])
def test_library_refuses_a_bad_partition_count(tmp_path, partitions):
    from cablestore.errors import RebuildError
    from cablestore.rebuild import rebuild

    with Store(tmp_path / "s", now=lambda: NOW) as s:
        s.ingest_many(generate(seed=1, posts=50))
        with pytest.raises(RebuildError, match="partitions must be"):
            s.check(partitions=partitions)
    with pytest.raises(RebuildError, match="partitions must be"):
        rebuild(tmp_path / "s", engine="local", partitions=partitions)


def test_ingest_cache_mb_reaches_the_store_and_a_bad_size_creates_nothing(tmp_path, capsys, monkeypatch):
    from cablestore.store import store as store_mod

    write_posts(tmp_path / "p.bin", generate(seed=8, posts=50))
    seen = []
    real_init = store_mod.Store.__init__

    def recording_init(self, *args, **kw):
        seen.append(kw.get("cache_mb"))
        real_init(self, *args, **kw)

    monkeypatch.setattr(store_mod.Store, "__init__", recording_init)
    store = tmp_path / "s.ldb"
    with pytest.raises(SystemExit) as exc:  # refused while parsing: every count option has a maximum
        main(["ingest", str(store), str(tmp_path / "p.bin"), "--quiet", "--cache-mb", "70000"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("argument --cache-mb: must be from 0 to 65536, got 70000") and not store.exists()
    assert main(["ingest", str(store), str(tmp_path / "p.bin"), "--quiet", "--cache-mb", "256"]) == 0
    assert main(["ingest", str(store), str(tmp_path / "p.bin"), "--quiet"]) == 0
    assert seen == [256, None]  # None: the Store's own default


# --- one meaning for --workers ----------------------------------------------------------------------


def test_workers_0_is_the_one_thread_mode(tmp_path, capsys):
    write_posts(tmp_path / "p.bin", generate(seed=2, posts=120))
    code, out, err = run_cli(capsys, ["ingest", tmp_path / "s.ldb", tmp_path / "p.bin", "--workers", "0", "--json"])
    assert code == 0, err
    assert json.loads(out)["new"] == 120
    code, out, err = run_cli(capsys, ["export", tmp_path / "s.ldb", tmp_path / "snap", "--workers", "0", "--json"])
    assert code == 0 and json.loads(out)["posts"] > 0, err
    assert "0 verifies in this one thread" in " ".join(parse_help(capsys, ["ingest", "--help"]).split())


# --- help ------------------------------------------------------------------------------------------


def test_every_argument_of_every_command_has_help():
    missing = [name for name, action in _all_actions(build_parser()) if not action.help]
    assert missing == []
    choices = build_parser()._subparsers._group_actions[0]
    assert all(a.help for a in choices._choices_actions)  # every command too


def test_hides_user_metavar_is_not_the_key_files(capsys):
    usage = " ".join(parse_help(capsys, ["hide", "--help"]).split())
    assert "--key KEYFILE" in usage and "--user PUBKEY [PUBKEY ...]" in usage
