"""Keep the documentation true: KEYSPACE.md's table, the README, docs/tour.md and docs/*.md.

Conventions the tests below rely on (CONTRIBUTING.md repeats them):

- a ```console block is a real session: every ``$ cablestore ...`` line runs,
  in order, in an empty directory, and its output must have the shape shown
  (every console block of docs/*.md, one session per file; docs/tour.md's
  session runs every subcommand);
- the README's library example and docs/tour.md's library blocks run;
- every other block (```sh, ```text, ...) is shown, not run: each
  ``cablestore`` and ``python -m`` command in it, and in inline code, must
  name a subcommand or module that exists, with flags that exist;
- module paths (``cablestore/store/write/indexer.py``), dotted names
  (``cablestore.peer.transport.run_server``) and relative links must resolve.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from cablestore import DELETE, Store
from cablestore.authoring.author import Author
from cablestore.authoring.workload import generate, read_posts
from cablestore.cli import build_parser, main
from cablestore.errors import DroppedError

from . import moderation_helpers as mh
from .conftest import NOW, keypair, post, stop
from .moderation_helpers import URSULA, cabal

ROOT = Path(__file__).resolve().parent.parent
FIXED = {"hash": 32, "pubkey": 32, "target": 32, "by": 32, "mono": 40, "rmono": 40, "type": 1, "peer": 32, "shift": 1, "bucket": 8}
ESCAPED = {"ch", "key"}
DOCS = sorted((ROOT / "docs").glob("*.md"))
TOUR = ROOT / "docs" / "tour.md"  # the library and every command, run step by step
# What describes the project as it is now (CHANGELOG.md names old paths on purpose).
CURRENT = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *DOCS]


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
        elif name == "term":  # a search term: UTF-8 without NUL, ended by one 00
            end = key.find(b"\x00", pos)
            if end < 0:
                return False
            pos = end + 1
        elif name in ESCAPED:
            end = key.find(b"\x00\x01", pos)
            if end < 0:
                return False
            pos = end + 2
    return pos == len(key)


@pytest.fixture(scope="module")
def populated(tmp_path_factory):
    path = tmp_path_factory.mktemp("docs") / "store"
    with Store(path, now=lambda: NOW, search=True) as s:  # the search view too
        s.ingest_many(read_posts(ROOT / "tests/data/cablejs-0.2.1-s7-2000/posts.bin"))
        s.ingest_many(generate(seed=3, posts=500))
        Author(s, keypair("docs"), now=lambda: NOW).text("general", "written here")  # the local clock
        s.set_sync_cursor("127.0.0.1:7000", "general", NOW)
    with Store(path, now=lambda: NOW, local_user=URSULA.public_key) as s:  # a moderated cabal: every moderation row
        assert all(r.ok or isinstance(r.error, DroppedError) for r in s.ingest_many(cabal()))  # its spam is dropped
        stored = s.channel_time_range("dev")[0]  # someone else's post: a delete of it is refused, its author kept
        assert not s.ingest_many([post(keypair("forger"), DELETE, NOW, hashes=(stored,))])[0].ok
        # someone (not blocked) blocks Ursula with notify; a user Ursula drop-blocks keeps only a fact of their post/info
        gone = keypair("gone")
        s.ingest_many([mh.block(keypair("notifier"), URSULA, NOW - 5, notify=1)[0], mh.block(URSULA, gone, NOW - 4, drop=1)[0]])
        assert not s.ingest_many([mh.info(gone, NOW - 3, name="gone")[0]])[0].ok
        s.set_seed(b"\x01" + keypair("seeded").public_key)  # a seed, cleared (its applied posts kept), then another
        s.clear_seed()
        s.set_seed(b"\x00" + keypair("seeded").public_key)
        s.db.put(b"!post!" + bytes(32), b"a damaged post")  # a repair sets it aside under !quarantine!
        assert s.check(fix=True, record=True).consistent  # as `check --repair`: !local!checked
        s.remember_lost([{"hash": bytes(range(32)).hex()}])  # a post recover found gone: !local!lost!<hash>
        s.db.put(b"!local!reindexing", b"")  # what a reindex interrupted leaves
        s.db.put(b"!local!migrating", b"")  # what a migration interrupted leaves (beside cablestore-1; only its key is checked here)
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


# --- console sessions ---------------------------------------------------------


def _shown_commands(path: Path) -> list[list[str]]:
    """Every ``cablestore`` command of ``path``'s sh blocks (argv after ``cablestore``)."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", path.read_text(), re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("cablestore "):
                commands.append(shlex.split(line)[1:])
    return commands


def _console_steps(text: str) -> list[tuple[list[str], list[str]]]:
    """The console blocks of ``text``: (argv after ``cablestore``, documented output lines), in order."""
    steps: list[tuple[list[str], list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        for line in block.splitlines():
            if line.startswith("$ cablestore "):
                steps.append((shlex.split(line[2:])[1:], []))
            else:
                assert not line.startswith("$ "), f"a console block runs only `$ cablestore` lines: {line!r}"
                assert steps, f"a console block must start with a `$ cablestore` line: {line!r}"
                steps[-1][1].append(line)
    return steps


def _session() -> list[tuple[list[str], list[str]]]:
    """docs/tour.md's console blocks, one session: (argv, documented output lines), in order."""
    return _console_steps(TOUR.read_text())


def _readme_table_commands(readme: str | None = None) -> list[str]:
    """The subcommands the README's Commands table names (first column, each in backticks)."""
    readme = (ROOT / "README.md").read_text() if readme is None else readme
    section = readme.split("\n## Commands\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| ([^|]+) \| [^|]+ \|$", section, re.M)
    return [name for row in rows[1:] for name in re.findall(r"`([a-z]+)`", row)] if rows[:1] == ["commands"] else []


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


def _subcommands() -> dict:
    return build_parser()._subparsers._group_actions[0].choices


def test_readme_table_names_every_command_once_and_the_tour_runs_each():
    parser = build_parser()
    subcommands = set(parser._subparsers._group_actions[0].choices)
    named = _readme_table_commands()
    assert sorted(named) == sorted(subcommands)  # each exactly once
    assert {argv[0] for argv, _ in _session()} == subcommands  # and each one runs below
    commands = [argv[:-1] if argv[-1] == "&" else argv for argv, _ in _session()]
    commands += _shown_commands(ROOT / "README.md") + _shown_commands(TOUR)
    for argv in commands:
        args = parser.parse_args(argv)
        assert args.command == argv[0]


def test_readme_table_check_can_fail():
    table = "# x\n\n## Commands\n\n| commands | what they do |\n|---|---|\n| `demo`, `ingest` | x |\n| `serve` | y |\n\n## Next\n"
    assert _readme_table_commands(table) == ["demo", "ingest", "serve"]
    assert _readme_table_commands(table.replace("| commands |", "| command |")) == []  # not the table it reads


def _shaped(text: str) -> str:
    return "\n".join(_shape(line) for line in text.splitlines()) + "\n"


def test_shape_matching_can_fail():
    assert re.fullmatch(_shape_pattern(["a 1", "...", "z"]), _shaped("a 22\nb\nc\nz"))
    assert re.fullmatch(_shape_pattern(["a  1  b"]), _shaped("a 1,234 b"))
    assert not re.fullmatch(_shape_pattern(["a 1", "z"]), _shaped("a 22\nb\nz"))
    assert not re.fullmatch(_shape_pattern(["wrote 1 posts"]), _shaped("wrote 1 post"))
    assert re.fullmatch(_shape_pattern(['{"hash": …']), _shaped('{"hash": "ab12", "x": 3}'))


def _run_session(steps: list[tuple[list[str], list[str]]], cwd: Path) -> None:
    """Run each step with ``main`` in ``cwd`` (``&``: a background process) and compare shapes."""
    background = []  # `$ cablestore serve ... &`: a real process, stopped (and checked) at the end
    try:
        for argv, documented in steps:
            if argv[-1] == "&":
                background.append(_start(argv[:-1], documented, cwd))
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


def test_tour_commands_run_and_print_what_the_tour_shows(tmp_path, monkeypatch):
    """sqlite-utils style: docs/tour.md's command line is a real session; run it and compare."""
    monkeypatch.chdir(tmp_path)
    _run_session(_session(), tmp_path)


def _start(argv: list[str], documented: list[str], cwd: Path) -> subprocess.Popen:
    """Start a background command; its first lines must be the documented ones."""
    proc = subprocess.Popen([sys.executable, "-m", "cablestore", *argv], cwd=cwd, stdout=subprocess.PIPE, text=True)
    shown = _shaped("".join(proc.stdout.readline() for _ in documented))
    assert re.fullmatch(_shape_pattern(documented), shown), (argv, shown)
    return proc


DOC_SESSIONS = [doc for doc in DOCS if "```console\n" in doc.read_text() and doc != TOUR]  # the tour: above


def test_docs_have_a_session_and_no_stray_commands_in_it():
    assert DOC_SESSIONS, "docs/operations.md's maintenance session should run"
    for doc in DOC_SESSIONS:
        steps = _console_steps(doc.read_text())
        assert steps and all(argv for argv, _ in steps), doc.name


@pytest.mark.parametrize("doc", DOC_SESSIONS, ids=lambda d: d.name)
def test_docs_console_sessions_run_and_print_what_they_show(doc, tmp_path, monkeypatch):
    """Each docs/*.md file's console blocks, one session per file, run like the tour's."""
    monkeypatch.chdir(tmp_path)
    _run_session(_console_steps(doc.read_text()), tmp_path)


# --- the README's Quick start and library example, the tour's library ---------------


def test_quick_start_has_two_commands_and_ci_runs_the_test_one():
    text = (ROOT / "README.md").read_text()
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```sh\n(.*?)\n```", quick, re.S)
    assert commands == ["pip install -e . && python -m cablestore demo", "pip install -e '.[test]' && python -m pytest"]
    assert _runs_in_order(commands[1], (ROOT / ".ci/run").read_text())


def _runs_in_order(command: str, script: str) -> bool:
    """``a && b`` is in a ``set -e`` script: as one line, or as its steps on lines of their own, in order."""
    if command in script:
        return True
    lines = [line.strip() for line in script.splitlines()]
    if not any(re.match(r"set -\w*e", line) for line in lines):
        return False
    at = 0
    for step in command.split(" && "):
        if step.strip() not in lines[at:]:
            return False
        at = lines.index(step.strip(), at) + 1
    return True


def test_ci_order_check_can_fail():
    script = "set -euo pipefail\npip install -e '.[test]'\nruff check .\npython -m pytest\n"
    assert _runs_in_order("pip install -e '.[test]' && python -m pytest", script)
    assert not _runs_in_order("python -m pytest && pip install -e '.[test]'", script)
    assert not _runs_in_order("pip install -e '.[test]' && python -m pytest", script.replace("set -euo pipefail", ""))
    assert not _runs_in_order("pip install -e '.[test]' && python -m pytest -x", script)


def test_readme_library_example_runs(tmp_path, monkeypatch, capsys):
    text = (ROOT / "README.md").read_text()
    code = re.search(r"## Using the library\n\n```python\n(.*?)```", text, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    assert capsys.readouterr().out.split()[-1] == "hi"
    assert (tmp_path / "peer.ldb" / "CURRENT").exists()


def test_tour_library_runs_in_order_and_syncs_over_tcp(tmp_path, monkeypatch, capsys):
    """Every python block of docs/tour.md's "The library" (writing posts, serving and syncing over TCP), in order."""
    section = TOUR.read_text().split("\n## The library\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) >= 3
    assert any("run_server" in b and "sync_path" in b for b in blocks)
    monkeypatch.chdir(tmp_path)
    for i, code in enumerate(blocks):
        exec(compile(code, f"docs/tour.md (the library, block {i + 1})", "exec"), {})
    out = capsys.readouterr().out
    m = re.search(r"^(\d+) posts synced, complete: True$", out, re.M)
    assert m and int(m.group(1)) > 0, out
    with Store(tmp_path / "copy.ldb") as copy, Store(tmp_path / "peer.ldb") as source:
        assert copy.channel_list() == source.channel_list() == ["general"]
        assert copy.channel_time_range("general") == source.channel_time_range("general")
        assert copy.topic("general") == source.topic("general") == "cable chat"


# --- shown, not run: commands, flags, paths, names and links must exist ---------


def _fences(text: str) -> list[tuple[str, str]]:
    """(info string, body) of every fenced block."""
    return re.findall(r"^```([\w-]*)\n(.*?)^```", text, re.S | re.M)


def _prose(text: str) -> str:
    return re.sub(r"^```[\w-]*\n.*?^```", "", text, flags=re.S | re.M)


def _split_shell(line: str) -> list[list[str]]:
    """One shell line into its simple commands, leading ``NAME=value`` assignments dropped."""
    line = re.sub(r"(^|\s)#.*$", "", line).strip()
    commands = []
    for part in re.split(r"\s(?:&&|\|\||;|\|)\s", line):
        try:
            argv = shlex.split(part)
        except ValueError:
            continue
        while argv and re.match(r"^[A-Z_][A-Z0-9_]*=", argv[0]):
            argv = argv[1:]
        if argv and argv[-1] == "&":
            argv = argv[:-1]
        if argv:
            commands.append(argv)
    return commands


def _block_commands(info: str, body: str) -> list[list[str]]:
    """Commands of one fenced block: every line of a shell block, the ``$ `` lines of any other."""
    if info == "python":
        return []
    commands = []
    for line in body.replace("\\\n", " ").splitlines():
        if info in ("sh", "bash", "shell"):
            commands += _split_shell(line[2:] if line.startswith("$ ") else line)
        elif line.startswith("$ "):
            commands += _split_shell(line[2:])
    return commands


def _inline_commands(text: str) -> list[list[str]]:
    spans = [m.group(2).replace("\n", " ") for m in re.finditer(r"(`+)(.+?)\1", _prose(text), re.S)]
    return [argv for span in spans if re.match(r"(cablestore|python3? -m) ", span.strip()) for argv in _split_shell(span)]


def _documented(kind: str) -> list[tuple[str, list[str]]]:
    """(file, argv) for every command shown in blocks (``kind='block'``) or inline code."""
    found = []
    for path in CURRENT:
        text = path.read_text()
        if kind == "block":
            commands = [argv for info, body in _fences(text) for argv in _block_commands(info, body)]
        else:
            commands = _inline_commands(text)
        found += [(path.name, argv) for argv in commands]
    return found


def _cablestore_argv(argv: list[str]) -> list[str] | None:
    """The arguments after ``cablestore`` / ``python -m cablestore``, or None for other commands."""
    if argv[0] == "cablestore":
        return argv[1:]
    if argv[0] in ("python", "python3") and argv[1:3] == ["-m", "cablestore"]:
        return argv[3:]
    return None


def _flags(argv: list[str]) -> list[str]:
    return [a.strip("[]").split("=")[0] for a in argv if re.match(r"^\[?--?[A-Za-z]", a)]


def _check_cablestore(where: str, args: list[str], parse: bool) -> None:
    subcommands = _subcommands()
    if not args or args[0].isupper():  # `cablestore COMMAND --help`: a placeholder
        return
    assert args[0] in subcommands, f"{where}: `cablestore {args[0]}` is not a subcommand"
    known = set(subcommands[args[0]]._option_string_actions)
    for flag in _flags(args[1:]):
        assert flag in known, f"{where}: `cablestore {args[0]}` has no {flag}"
    if parse:
        try:
            build_parser().parse_args(args)
        except SystemExit:
            pytest.fail(f"{where}: `cablestore {shlex.join(args)}` does not parse")


@cache
def _module_help(module: str, cwd: str) -> str:
    """``python -m MODULE --help``, run from an empty directory (a module without argparse writes nothing here)."""
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"], cwd=cwd, capture_output=True, text=True, timeout=120, env=_env()
    )
    return done.stdout + done.stderr


def _env() -> dict:
    import os

    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def _markers() -> set[str]:
    text = (ROOT / "setup.cfg").read_text().split("markers =", 1)[1]
    return set(re.findall(r"^\s+(\w+):", text, re.M))


def _check_module(where: str, argv: list[str], help_dir: Path) -> None:
    module = argv[2]
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    assert importlib.util.find_spec(module) is not None, f"{where}: no module {module}"
    flags = _flags(argv[3:])
    if module == "pytest" and "-m" in argv[3:]:
        expression = argv[3:][argv[3:].index("-m") + 1]
        for word in re.findall(r"\w+", expression):
            assert word in {"and", "or", "not"} | _markers(), f"{where}: no pytest marker {word!r} in setup.cfg"
    if flags:
        shown = _module_help(module, str(help_dir))
        assert "usage:" in shown, f"{where}: `python -m {module} --help` printed no usage"
        for flag in flags:
            assert re.search(r"(?<![\w-])" + re.escape(flag) + r"(?![\w-])", shown), f"{where}: `python -m {module}` has no {flag}"


def _check_command(where: str, argv: list[str], parse: bool, help_dir: Path) -> bool:
    """Check one documented command; True if it was one we know how to check."""
    args = _cablestore_argv(argv)
    if args is not None:
        _check_cablestore(where, args, parse)
        return True
    if argv[0] in ("python", "python3") and len(argv) > 2 and argv[1] == "-m":
        _check_module(where, argv, help_dir)
        return True
    return False


@pytest.fixture(scope="module")
def help_dir(tmp_path_factory) -> Path:
    """One empty directory for every ``python -m MODULE --help`` of this file: ``_module_help`` runs each module once."""
    return tmp_path_factory.mktemp("help")


def test_commands_shown_in_blocks_exist_with_their_flags(help_dir):
    """sh/text blocks are shown, not run: each cablestore command parses, each ``python -m`` module and flag exists."""
    checked = [argv for name, argv in _documented("block") if _check_command(name, argv, parse=True, help_dir=help_dir)]
    modules = {argv[2] for argv in checked if _cablestore_argv(argv) is None}
    assert {"benchmarks", "benchmarks.profile", "pytest"} <= modules  # docs/performance.md, CONTRIBUTING.md


def test_commands_named_inline_exist_with_their_flags(help_dir):
    checked = [argv for name, argv in _documented("inline") if _check_command(name, argv, parse=False, help_dir=help_dir)]
    assert len(checked) >= 10


def test_check_of_commands_can_fail(help_dir):
    with pytest.raises(AssertionError):
        _check_command("x", ["cablestore", "frobnicate"], parse=False, help_dir=help_dir)
    with pytest.raises(AssertionError):
        _check_command("x", ["cablestore", "sync", "copy.ldb", "--no-such-flag"], parse=False, help_dir=help_dir)
    with pytest.raises(pytest.fail.Exception):
        _check_command("x", ["cablestore", "sync", "copy.ldb"], parse=True, help_dir=help_dir)  # --connect is required
    with pytest.raises(AssertionError):
        _check_command("x", ["python", "-m", "benchmarks.no_such_module"], parse=False, help_dir=help_dir)
    with pytest.raises(AssertionError):
        _check_command("x", ["python", "-m", "benchmarks.fuzz", "--no-such-flag", "3"], parse=False, help_dir=help_dir)
    with pytest.raises(AssertionError):
        _check_command("x", ["python", "-m", "pytest", "-m", "not fast"], parse=False, help_dir=help_dir)
    assert _split_shell("A=1 B=2 cablestore x  # c && y") == [["cablestore", "x"]]
    assert _split_shell("pip install -e . && python -m cablestore demo") == [["pip", "install", "-e", "."], ["python", "-m", "cablestore", "demo"]]


def _resolves(dotted: str) -> bool:
    """``cablestore.a.b.name``: a module, or an attribute of the longest module prefix."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            continue
        if i == len(parts):
            return True
        if parts[i - 1] == "__main__":
            return False
        obj = importlib.import_module(name)
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


PATH_RE = re.compile(r"(?<![\w./-])((?:cablestore|rebuild|views|benchmarks|tests|interop|docs|\.ci)/[\w./-]*\w)")


def test_module_paths_and_names_in_the_docs_exist():
    """After the layout moves: every file path and every ``cablestore.x.y`` name the docs give resolves."""
    missing = []
    for path in CURRENT:
        for code in re.findall(r"`([^`\n]+)`", _prose(path.read_text())):  # inline code: diagrams may abbreviate
            for name in PATH_RE.findall(code):
                if not name.startswith("docs/api") and not (ROOT / name).exists():
                    missing.append((path.name, name))
            for dotted in re.findall(r"(?<![\w./])(cablestore(?:\.\w+)+)", code):
                if not _resolves(dotted):
                    missing.append((path.name, dotted))
    assert not missing


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", _prose(path.read_text()), re.M)}


def test_relative_links_and_anchors_resolve():
    broken = []
    for path in [*CURRENT, ROOT / "CHANGELOG.md"]:
        for target, anchor in re.findall(r"\]\(([^)\s#]*)(?:#([^)\s]+))?\)", _prose(path.read_text())):
            if re.match(r"\w+:", target):
                continue  # https:, mailto:
            dest = (path.parent / target).resolve() if target else path
            if not dest.exists():
                broken.append((path.name, target))
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append((path.name, f"{target}#{anchor}"))
    assert not broken


FILE_RE = re.compile(r"(?<![\w./-])((?:(?:cablestore|rebuild|views|benchmarks|tests|interop|docs|examples)/[\w./-]*|[A-Z]+)\.(?:py|pyx|pxi|md|sh|html|css|js))\b")


def _library_files_named(text: str) -> list[str]:
    """The repository files ``text`` names: ``docs/x.md``, ``rebuild/fold.py``, ``KEYSPACE.md`` (an installed ``cablestore/views/x.py`` is ``views/x.py``)."""
    return [re.sub(r"^cablestore/(views|rebuild)/", r"\1/", name) for name in FILE_RE.findall(text)]


def test_files_the_library_names_exist():
    """A comment or docstring pointing at a file points at one that exists (after a move, at its new place)."""
    missing = []
    for folder in ("cablestore", "views", "rebuild"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix in (".py", ".pyx", ".pxi"):
                missing += [f"{path.relative_to(ROOT)}: {name}" for name in _library_files_named(path.read_text()) if not (ROOT / name).exists()]
    assert missing == []


def test_check_of_library_file_names_can_fail():
    assert _library_files_named("see rebuild/spark.py and docs/export.md, KEYSPACE.md; cablestore/views/chat.py") == [
        "rebuild/spark.py", "docs/export.md", "KEYSPACE.md", "views/chat.py"
    ]
