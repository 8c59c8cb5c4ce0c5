"""Read-only opening: the read commands and ``Store(path, readonly=True)`` write nothing in a store's directory.

Real CLI processes, a real read-only medium (a read-only bind mount; where
the kernel refuses one, files made immutable with ``chattr +i``: the tests
run as root, and root ignores permission bits), real writer processes
holding the store.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cablestore import JOIN, TEXT, TOPIC, Store, post_hash
from cablestore.cli import build_parser
from cablestore.errors import ReadOnlyStoreError, StoreLockedError
from cablestore.rebuild.reindex import reindex

from .conftest import NOW, keypair, post, stop

CLI = [sys.executable, "-m", "cablestore"]


def cli(*args, env=None):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=120, env=env)


def commands() -> list[tuple]:
    """Every command that only reads a store (``users`` too, where this branch has it), with its arguments after STORE."""
    listed = [
        ("stats",), ("stats", "--json"), ("show", "general"), ("show", "general", "--json"), ("channels",), ("dump",),
        ("dump", "--json"), ("heads", "general"), ("roles",), ("moderation",), ("check",), ("check", "--json"),
        ("rebuild", "--engine", "local", "--quiet"),
    ]
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    if "users" in sub.choices:
        listed.append(("users",))
    return listed


def picture(path: Path) -> dict:
    """Every entry under ``path`` (the directory itself too): kind, size, mtime in ns, and a file's content digest."""
    seen = {}
    for root, dirs, files in os.walk(path):
        for name in [".", *dirs, *files] if root == os.fspath(path) else [*dirs, *files]:
            full = os.path.join(root, name)
            st = os.lstat(full)
            digest = hashlib.sha256(Path(full).read_bytes()).hexdigest() if os.path.isfile(full) and not os.path.islink(full) else None
            seen[os.path.relpath(full, path)] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return seen


@pytest.fixture
def made(tmp_path) -> Path:
    """A closed store with a channel, a topic, messages and a name."""
    alice, bob = keypair("alice"), keypair("bob")
    path = tmp_path / "store"
    with Store(path, now=lambda: NOW) as s:
        s.ingest_many([
            post(alice, JOIN, NOW - 10, channel="general"),
            post(alice, TOPIC, NOW - 9, channel="general", topic="tea"),
            post(bob, JOIN, NOW - 8, channel="general"),
            *(post(alice if i % 2 else bob, TEXT, NOW - 7 + i, channel="general", text=f"message {i}") for i in range(5)),
        ])
    return path


@contextlib.contextmanager
def read_only_medium(path: Path, tmp_path: Path):
    """``path`` seen where nothing can be written, even by root: a read-only bind mount, else immutable files."""
    mount = tmp_path / "readonly-mount"
    mount.mkdir()
    bound = subprocess.run(["mount", "--bind", path, mount], capture_output=True)
    if bound.returncode == 0:
        try:
            remounted = subprocess.run(["mount", "-o", "remount,ro,bind", mount], capture_output=True, text=True)
            assert remounted.returncode == 0, remounted.stderr
            with pytest.raises(OSError):
                (mount / "probe").write_bytes(b"")
            yield mount
        finally:
            subprocess.run(["umount", mount], check=True)
        return
    names = [path, *path.iterdir()]
    made = subprocess.run(["chattr", "+i", *names], capture_output=True, text=True)
    assert made.returncode == 0, f"neither a read-only bind mount ({bound.stderr!r}) nor chattr +i ({made.stderr!r}) works here"
    try:
        with pytest.raises(OSError):
            (path / "probe").write_bytes(b"")
        yield path
    finally:
        subprocess.run(["chattr", "-i", *names], check=True)


def test_every_read_command_writes_nothing_in_the_store(made, tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    os.mkdir(env["TMPDIR"])
    before = picture(made)
    for args in commands():
        out = cli(args[0], made, *args[1:], env=env)
        assert out.returncode == 0, (args, out.stderr)
        assert picture(made) == before, args
    assert os.listdir(env["TMPDIR"]) == []  # the directories of links were removed
    exported = cli("export", made, tmp_path / "snapshot", "--partitions", "2", env=env)
    assert exported.returncode == 0, exported.stderr
    assert picture(made) == before


def test_the_api_opens_read_only_without_writing(made):
    before = picture(made)
    with Store(made, readonly=True) as s:
        assert s.stats().posts == 8 and s.topic("general") == "tea" and len(s.messages("general")) == 5
        links = s._links.dir
        assert links.exists() and not links.is_relative_to(made)
    assert picture(made) == before
    assert not links.exists()
    with Store(made) as s:  # a writer opens it afterwards, as before
        assert s.stats().posts == 8


def test_read_commands_work_on_a_read_only_medium(made, tmp_path):
    with Store(made) as s:
        expected = s.stats().posts
    with read_only_medium(made, tmp_path) as ro:
        before = picture(ro)
        for args in commands():
            out = cli(args[0], ro, *args[1:])
            assert out.returncode == 0, (args, out.stderr)
        stats = json.loads(cli("stats", ro, "--json").stdout)
        assert stats["posts"] == expected
        assert cli("export", ro, tmp_path / "snapshot", "--partitions", "2").returncode == 0
        with Store(ro, readonly=True) as s:
            assert len(s.messages("general")) == 5
        assert picture(ro) == before


def test_a_store_left_open_by_a_killed_writer_is_read_without_writing(tmp_path):
    """The write-ahead log still holds the posts (no close flushed it): LevelDB replays it from a link, into its own directory."""
    path = tmp_path / "store"
    code = (
        "import os, sys, cablestore\n"
        "from tests.conftest import keypair, post, NOW\n"
        f"s = cablestore.Store({str(path)!r}, now=lambda: NOW)\n"
        "s.ingest_many([post(keypair('a'), cablestore.JOIN, NOW - i, channel='general') for i in range(3)])\n"
        "os._exit(0)\n"  # no close: the log is left as it is
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=Path(__file__).parent.parent)
    assert any(f.suffix == ".log" and f.stat().st_size for f in path.iterdir())
    before = picture(path)
    with Store(path, readonly=True) as s:
        assert s.stats().posts == 3
    out = cli("show", path, "general", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["members"] == 1
    assert picture(path) == before


def test_a_compaction_in_a_read_only_store_deletes_only_links(made):
    with Store(made, readonly=True) as s:
        before = picture(made)
        s.db.compact_range()  # LevelDB writes new tables and deletes its inputs: the links
        assert picture(made) == before
        assert s.stats().posts == 8


def test_every_write_of_a_read_only_store_is_refused(made):
    alice = keypair("alice")
    before = picture(made)
    new = post(alice, TEXT, NOW, channel="general", text="new")
    with Store(made, readonly=True) as s:
        some = next(iter(s.channel_time_range("general")))
        writes = {
            "ingest": lambda: s.ingest(new),
            "ingest_many": lambda: s.ingest_many([new]),
            "ingest_batches": lambda: list(s.ingest_batches([[new]])),
            "delete": lambda: s.delete(some),
            "purge_author": lambda: s.purge_author(alice.public_key),
            "learn_listing": lambda: s.learn_listing("general", [some]),
            "check(fix=True)": lambda: s.check(fix=True),
            "reindex": lambda: reindex(s),
        }
        for name, write in writes.items():
            with pytest.raises(ReadOnlyStoreError, match="read-only"):
                write()
            assert post_hash(new) not in s and s.stats().posts == 8, name
        assert s.check().consistent  # verifying is reading
    assert picture(made) == before
    with pytest.raises(ReadOnlyStoreError):  # a local user it would have to keep
        Store(made, readonly=True, local_user=alice.public_key)
    assert picture(made) == before


def test_a_running_writer_is_detected_and_readers_share(made, tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import sys, cablestore; s = cablestore.Store({str(made)!r}); print('ok', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ok"
        with pytest.raises(StoreLockedError):
            Store(made, readonly=True)
        out = cli("stats", made)
        assert out.returncode == 2 and "StoreLockedError" in out.stderr and out.stderr.count("\n") == 1
    finally:
        stop(holder)
    reader = "import cablestore; s = cablestore.Store({!r}, readonly={}); print(s.stats().posts)"  # (never closed)
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    os.mkdir(env["TMPDIR"])
    with Store(made, readonly=True):  # a reader holds it: other readers share it, a writer waits its turn
        (made / "LOCK").read_bytes()  # this process opening and closing LOCK keeps the reader's lock
        other = subprocess.run([sys.executable, "-c", reader.format(str(made), True)], capture_output=True, text=True, timeout=60, env=env)
        assert other.stdout.strip() == "8", other.stderr
        assert os.listdir(env["TMPDIR"]) == []  # its directory of links went with the process
        writer = subprocess.run([sys.executable, "-c", reader.format(str(made), False)], capture_output=True, text=True, timeout=60)
        assert "StoreLockedError" in writer.stderr
        with pytest.raises(StoreLockedError):  # one Store per path per process
            Store(made)
    with Store(made) as s:
        assert s.stats().posts == 8


def test_readonly_is_a_bool_and_never_creates(tmp_path):
    from cablestore.errors import ArgumentError, StoreNotFoundError

    with pytest.raises(ArgumentError):
        Store(tmp_path / "s", readonly="yes")
    with pytest.raises(StoreNotFoundError):
        Store(tmp_path / "missing", readonly=True)  # create=True (the default) is ignored
    assert not (tmp_path / "missing").exists() and not (tmp_path / "s").exists()


def test_a_store_without_lock_is_read_without_creating_one(made):
    (made / "LOCK").unlink()  # a copy that left it out
    before = picture(made)
    with Store(made, readonly=True) as s:
        assert s.stats().posts == 8
    out = cli("stats", made, "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["posts"] == 8
    assert picture(made) == before and not (made / "LOCK").exists()
