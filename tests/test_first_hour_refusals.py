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
