"""Keep the documentation true: KEYSPACE.md's table and the README's commands."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from cablestore import Store
from cablestore.authoring.author import Author
from cablestore.authoring.workload import generate, read_posts
from cablestore.cli import build_parser, main
from cablestore.peer.sync import write_cursor

from .conftest import NOW, keypair, stop

ROOT = Path(__file__).resolve().parent.parent
FIXED = {"hash": 32, "pubkey": 32, "target": 32, "by": 32, "mono": 40, "type": 1, "peer": 32}
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
        write_cursor(s, "127.0.0.1:7000", "general", NOW)
        s.db.put(b"!post!" + bytes(32), b"a damaged post")  # a repair sets it aside under !quarantine!
        assert s.check(fix=True).consistent
        yield s


def test_every_key_matches_exactly_one_documented_row(populated):
    rows = _keyspace_rows()
    assert len(rows) >= 16  # the table parsed (the row set itself is checked below)
    used = {row: 0 for row in rows}
    for key, _ in populated.items():
        matching = [row for row in rows if _matches(row, key)]
        assert len(matching) == 1, (key, matching)
        used[matching[0]] += 1
    assert all(used.values()), [row for row, n in used.items() if not n]


def _readme_commands() -> list[list[str]]:
    """Every ``cablestore`` command in the README: sh blocks and ``$ `` lines of console blocks."""
    text = (ROOT / "README.md").read_text()
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("cablestore "):
                commands.append(shlex.split(line)[1:])
    commands += [argv[:-1] if argv[-1] == "&" else argv for argv, _ in _session()]
    return commands


def _session() -> list[tuple[list[str], list[str]]]:
    """The Commands section's console blocks: (argv, documented output lines), in order."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    steps: list[tuple[list[str], list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", section, re.S):
        for line in block.splitlines():
            if line.startswith("$ cablestore "):
                steps.append((shlex.split(line[2:])[1:], []))
            else:
                steps[-1][1].append(line)
    return steps


def _shape(line: str) -> str:
    """A line with every number as N and runs of spaces as one: what must match."""
    return re.sub(r" +", " ", re.sub(r"\d[\d,.]*", "N", line)).rstrip()


def _shape_pattern(documented: list[str]) -> str:
    parts = []
    for line in documented:
        if line == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        elif line.endswith("…"):
            parts.append(re.escape(_shape(line[:-1])) + r"[^\n]*\n")
        else:
            parts.append(re.escape(_shape(line)) + r"\n")
    return "".join(parts)


def test_readme_shows_every_command_and_each_parses():
    parser = build_parser()
    subcommands = set(parser._subparsers._group_actions[0].choices)
    commands = _readme_commands()
    assert {c[0] for c in commands} == subcommands
    assert {argv[0] for argv, _ in _session()} == subcommands  # and each one runs below
    for argv in commands:
        args = parser.parse_args(argv)
        assert args.command == argv[0]


def _shaped(text: str) -> str:
    return "\n".join(_shape(line) for line in text.splitlines()) + "\n"


def test_shape_matching_can_fail():
    assert re.fullmatch(_shape_pattern(["a 1", "...", "z"]), _shaped("a 22\nb\nc\nz"))
    assert re.fullmatch(_shape_pattern(["a  1  b"]), _shaped("a 1,234 b"))
    assert not re.fullmatch(_shape_pattern(["a 1", "z"]), _shaped("a 22\nb\nz"))
    assert not re.fullmatch(_shape_pattern(["wrote 1 posts"]), _shaped("wrote 1 post"))
    assert re.fullmatch(_shape_pattern(['{"hash": …']), _shaped('{"hash": "ab12", "x": 3}'))


def test_readme_commands_run_and_print_what_the_readme_shows(tmp_path, monkeypatch):
    """sqlite-utils style: the Commands section is a real session; run it and compare."""
    monkeypatch.chdir(tmp_path)
    background = []  # `$ cablestore serve ... &`: a real process, stopped (and checked) at the end
    try:
        for argv, documented in _session():
            if argv[-1] == "&":
                background.append(_start(argv[:-1], documented, tmp_path))
                continue
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = main(argv)
            shown = _shaped(out.getvalue())
            assert status == 0, (argv, err.getvalue())
            assert re.fullmatch(_shape_pattern(documented), shown), (argv, out.getvalue())
    finally:
        for proc in background:
            assert stop(proc) == 0


def _start(argv: list[str], documented: list[str], cwd: Path) -> subprocess.Popen:
    """Start a background command; its first lines must be the documented ones."""
    proc = subprocess.Popen([sys.executable, "-m", "cablestore", *argv], cwd=cwd, stdout=subprocess.PIPE, text=True)
    shown = _shaped("".join(proc.stdout.readline() for _ in documented))
    assert re.fullmatch(_shape_pattern(documented), shown), (argv, shown)
    return proc


def test_quick_start_has_two_commands_and_ci_runs_the_test_one():
    text = (ROOT / "README.md").read_text()
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```sh\n(.*?)\n```", quick, re.S)
    assert commands == ["pip install -e . && python -m cablestore demo", "pip install -e '.[test]' && python -m pytest"]
    assert commands[1] in (ROOT / ".ci/run").read_text()


def test_readme_library_example_runs(tmp_path, monkeypatch, capsys):
    text = (ROOT / "README.md").read_text()
    code = re.search(r"## Using the library\n\n```python\n(.*?)```", text, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    assert capsys.readouterr().out.split()[-1] == "hi"
    assert (tmp_path / "peer.ldb" / "CURRENT").exists()
