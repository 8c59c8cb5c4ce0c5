"""Keep the documentation true: KEYSPACE.md's table and the README's commands."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from cablestore import Store
from cablestore.cli import build_parser
from cablestore.workload import generate, read_posts

from cablestore.author import Author

from .conftest import NOW, keypair

ROOT = Path(__file__).resolve().parent.parent
FIXED = {"hash": 32, "pubkey": 32, "target": 32, "by": 32, "mono": 40, "type": 1}
ESCAPED = {"ch", "key"}


def _keyspace_rows() -> list[str]:
    rows = []
    for line in (ROOT / "KEYSPACE.md").read_text().splitlines():
        m = re.match(r"\| `(![^`]+)` \|", line)
        if m:
            rows.append(m.group(1))
    return rows


def _matches(template: str, key: bytes) -> bool:
    pos = 0
    for literal, name in re.findall(r"([^<]*)(?:<(\w+)>)?", template):
        lit = literal.encode()
        if not key.startswith(lit, pos):
            return False
        pos += len(lit)
        if name in FIXED:
            pos += FIXED[name]
            if pos > len(key):
                return False
        elif name == "rest":  # the rest of the key, whatever it holds
            pos = len(key)
        elif name in ESCAPED:
            end = key.find(b"\x00\x01", pos)
            if end < 0:
                return False
            pos = end + 2
    return pos == len(key)


@pytest.fixture(scope="module")
def populated(tmp_path_factory):
    path = tmp_path_factory.mktemp("docs") / "store"
    with Store(path, now=lambda: NOW) as s:
        s.ingest_many(read_posts(ROOT / "tests/data/cablejs-0.2.1-s7-2000/posts.bin"))
        s.ingest_many(generate(seed=3, posts=500))
        Author(s, keypair("docs"), now=lambda: NOW).text("general", "written here")  # the local clock
        s.db.put(b"!post!" + bytes(32), b"a damaged post")  # a repair sets it aside under !quarantine!
        assert s.check(fix=True).consistent
        yield s


def test_every_key_matches_exactly_one_documented_row(populated):
    rows = _keyspace_rows()
    assert len(rows) == 18
    used = {row: 0 for row in rows}
    for key, _ in populated.items():
        matching = [row for row in rows if _matches(row, key)]
        assert len(matching) == 1, (key, matching)
        used[matching[0]] += 1
    assert all(used.values()), [row for row, n in used.items() if not n]


def _readme_commands() -> list[list[str]]:
    text = (ROOT / "README.md").read_text()
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("cablestore "):
                commands.append(shlex.split(line)[1:])
    return commands


def test_readme_shows_every_command_and_each_parses():
    parser = build_parser()
    subcommands = set(parser._subparsers._group_actions[0].choices)
    commands = _readme_commands()
    assert {c[0] for c in commands} == subcommands
    for argv in commands:
        args = parser.parse_args(argv)
        assert args.command == argv[0]


def test_quick_start_has_two_commands_and_ci_runs_the_test_one():
    text = (ROOT / "README.md").read_text()
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```sh\n(.*?)\n```", quick, re.S)
    assert commands == ["pip install -e . && python -m cablestore demo", "pip install -e '.[test]' && python -m pytest"]
    assert commands[1] in (ROOT / ".ci/run").read_text()
