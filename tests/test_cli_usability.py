"""The CLI explains itself: show/stats/dump, validated arguments, messages that say what happened."""

from __future__ import annotations

import argparse
import io
import json
import os

import pytest

from cablestore import Store, post_hash
from cablestore.authoring.workload import generate, iter_posts, read_posts, write_posts
from cablestore.cli import build_parser, main
from cablestore.errors import PostsFileError

from .conftest import NOW


@pytest.fixture(scope="module")
def peer(tmp_path_factory):
    """A store of 600 generated posts (some deleted) and the posts file it came from."""
    d = tmp_path_factory.mktemp("cli")
    write_posts(d / "posts.bin", generate(seed=2, posts=600))
    assert main(["ingest", str(d / "peer.ldb"), str(d / "posts.bin"), "--quiet"]) == 0
    return d


def _files(path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


# --- show / stats / dump ----------------------------------------------------


def test_show_prints_a_channel_oldest_first_with_names_and_deletions(peer, capsys):
    capsys.readouterr()
    assert main(["show", str(peer / "peer.ldb"), "General", "--limit", "0"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    with Store(peer / "peer.ldb") as s:
        msgs = s.messages("general")
        topic = s.topic("general")
    assert header.startswith(f"#General: topic {topic!r}, ") and f"{len(msgs)} messages (all {len(msgs)}" in header
    assert len(lines) == len(msgs)
    first, last = msgs[-1], msgs[0]  # messages() is newest first; show reads like a chat window
    assert lines[0].startswith(f"{first.time:%Y-%m-%d %H:%M:%S}  {first.who}") and lines[0].endswith(first.text or "post]")
    assert lines[-1].startswith(f"{last.time:%Y-%m-%d %H:%M:%S}")
    deletes = [m for m in msgs if m.text is None]
    assert deletes and sum("[deleted " in line for line in lines) == len(deletes)


def test_show_limit_and_json(peer, capsys):
    capsys.readouterr()
    assert main(["show", str(peer / "peer.ldb"), "general", "--limit", "3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["messages"]) == 3 and data["messages_total"] > 3
    times = [m["timestamp"] for m in data["messages"]]
    assert times == sorted(times)
    assert {"hash", "type", "author", "author_name", "time", "timestamp"} <= set(data["messages"][0])


def test_show_unknown_channel_names_the_known_ones(peer, capsys):
    assert main(["show", str(peer / "peer.ldb"), "nowhere"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no channel 'nowhere'" in err and "general" in err


def test_stats_text_and_json(peer, capsys):
    capsys.readouterr()
    assert main(["stats", str(peer / "peer.ldb"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    with Store(peer / "peer.ldb") as s:
        assert data["posts"] == len(s) and data["tombstones"] == sum(1 for _ in s.items(b"!deleted!")) > 0
    assert main(["stats", str(peer / "peer.ldb")]) == 0
    out = capsys.readouterr().out
    assert f"  posts:       {data['posts']:,}" in out and "    post/delete " in out and "  on disk:     " in out


def test_dump_writes_every_post_as_a_json_line_with_raw_hex(peer, capsys):
    capsys.readouterr()
    assert main(["dump", str(peer / "peer.ldb")]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    with Store(peer / "peer.ldb") as s:
        assert {r["hash"] for r in rows} == {k[6:].hex() for k, _ in s.items(b"!post!")}
    for r in rows:
        assert post_hash(bytes.fromhex(r["raw"])).hex() == r["hash"]
    assert main(["dump", str(peer / "peer.ldb"), "--channel", "GENERAL"]) == 0
    some = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert 0 < len(some) < len(rows)
    assert all(r.get("channel", "general").casefold() == "general" for r in some)
    assert any(r["type"] == "post/delete" for r in some)


@pytest.mark.parametrize("command", [["show", "{p}", "general"], ["stats", "{p}"], ["dump", "{p}"]])
@pytest.mark.parametrize("kind", ["missing", "empty dir", "file"])
def test_read_only_commands_create_nothing(tmp_path, capsys, command, kind):
    target = tmp_path / "target"
    if kind == "empty dir":
        target.mkdir()
    elif kind == "file":
        target.write_bytes(b"not a store")
    before = _files(tmp_path)
    assert main([c.format(p=target) for c in command]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and {"missing": "does not exist", "empty dir": "empty directory", "file": "is a file"}[kind] in err
    assert _files(tmp_path) == before


def test_read_only_commands_change_no_key(peer, capsys):
    with Store(peer / "peer.ldb") as s:
        before = list(s.items())
    for argv in (["show", "peer.ldb", "general"], ["stats", "peer.ldb"], ["dump", "peer.ldb"]):
        assert main([str(peer / a) if a == "peer.ldb" else a for a in argv]) == 0
    with Store(peer / "peer.ldb") as s:
        assert list(s.items()) == before


# --- arguments ----------------------------------------------------------------


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


def _actions(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                yield from ((f"{name} {a}", h) for a, h in _actions(subparser))
        else:
            yield "/".join(action.option_strings) or action.dest, action.help


def test_every_argument_of_every_command_has_help():
    missing = [name for name, text in _actions(build_parser()) if not text]
    assert missing == []
    choices = build_parser()._subparsers._group_actions[0]
    assert all(a.help for a in choices._choices_actions)  # every command too


# --- messages -------------------------------------------------------------------


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


def test_ingest_summary_separates_new_already_stored_and_refused_by_reason(tmp_path, capsys):
    bufs = generate(seed=6, posts=300)
    forged = bytearray(bufs[-1])
    forged[-1] ^= 1
    write_posts(tmp_path / "a.bin", bufs[:200])
    write_posts(tmp_path / "b.bin", bufs[150:] + [bytes(forged), b"\x00" * 120])
    store = str(tmp_path / "s.ldb")
    assert main(["ingest", store, str(tmp_path / "a.bin"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["ingest", store, str(tmp_path / "b.bin"), "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"read 152 posts from 1 file into {store}"
    assert lines[1] == "  new:            100"
    assert lines[2].startswith("  already stored: ") and int(lines[2].split()[-1]) <= 50
    refused = int(lines[3].split()[-1])
    assert lines[3].startswith("  refused:        ") and refused >= 2
    reasons = dict(line.strip().split(": ") for line in lines[4:])
    assert reasons["SignatureError"] == "1" and sum(map(int, reasons.values())) == refused
    assert "{" not in "\n".join(lines)
    assert main(["ingest", store, str(tmp_path / "b.bin"), "--quiet", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # (a post whose deleting post/delete was itself deleted may come back as new: see docs/design.md on deletes)
    assert data["new"] + data["already_stored"] + sum(data["refused"].values()) == data["read"] == 152
    assert data["accepted"] == data["new"] + data["already_stored"] and data["refused"]["SignatureError"] == 1


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_export_progress_line_completes(peer, tmp_path, monkeypatch, capsys):
    tty = _Tty()
    monkeypatch.setattr("sys.stderr", tty)
    assert main(["export", str(peer / "peer.ldb"), str(tmp_path / "snap")]) == 0
    with Store(peer / "peer.ldb") as s:
        total = sum(1 for _ in s.items(b"!post!")) + sum(1 for _ in s.items(b"!deleted!"))
    last = tty.getvalue().split("\r\033[K")[-1]
    assert last.startswith(f"export posts and tombstones: [{'#' * 30}] {total}/{total} ") and last.endswith("/s\n")  # and the rate


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


# --- the demo -----------------------------------------------------------------------


def test_demo_explains_its_numbers_and_says_no_topic(tmp_path):
    from cablestore.demo import run_demo

    lines: list[str] = []
    report = run_demo(tmp_path / "demo.ldb", posts=2000, seed=1, engine="local", out=lines.append)
    text = "\n".join(lines)
    stored, deleted = report["stored"]["posts"], report["stored"]["deleted"]
    assert report["ok"] and stored + deleted == 2000 and deleted > 0
    assert report["rebuild"]["posts"] == stored  # the rebuild verifies what is stored, not what was sent
    assert f"{stored} posts are stored: the other {deleted} were deleted by post/deletes" in text
    assert f"checks those {stored} posts and the {report['stored']['tombstones']} tombstones" in text
    assert "(no topic)" in text and "topic ''" not in text
    assert any(v["topic"] == "" for v in report["channels"].values())


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
    with pytest.raises(SystemExit) as exc:  # refused while parsing (issue 36: every count option has a maximum)
        main(["ingest", str(store), str(tmp_path / "p.bin"), "--quiet", "--cache-mb", "70000"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("argument --cache-mb: must be from 0 to 65536, got 70000") and not store.exists()
    assert main(["ingest", str(store), str(tmp_path / "p.bin"), "--quiet", "--cache-mb", "256"]) == 0
    assert main(["ingest", str(store), str(tmp_path / "p.bin"), "--quiet"]) == 0
    assert seen == [256, None]  # None: the Store's own default


def test_the_cli_spells_library_errors_with_its_flags(tmp_path, capsys):
    """Library errors name no flag (issue 32); the CLI line still shows the flag that acts on the error."""
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
