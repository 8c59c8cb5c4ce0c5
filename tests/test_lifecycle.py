"""Opening and closing a store: locks, wrong paths, foreign databases, close under load."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import plyvel
import pytest

from cablestore import Store, post_hash
from cablestore.authoring.workload import Workload, write_posts
from cablestore.cli import main
from cablestore.errors import (
    CableError,
    NotAStoreError,
    StoreClosedError,
    StoreCorruptError,
    StoreLockedError,
    StoreNotFoundError,
)

from .conftest import NOW

ROOT = Path(__file__).resolve().parent.parent
TRY_OPEN = (
    "import sys\nfrom cablestore import Store\nfrom cablestore.errors import StoreLockedError\n"
    "try:\n    s = Store(sys.argv[1])\nexcept StoreLockedError as e:\n    print('locked:', e); sys.exit(3)\n"
    "s.close()\n"
)


def listing(path: Path) -> dict:
    """Every file under ``path`` with its bytes (to prove nothing changed)."""
    if path.is_file():
        return {"": path.read_bytes()}
    return {str(p.relative_to(path)): (p.read_bytes() if p.is_file() else None) for p in sorted(path.rglob("*"))}


def other_process_open(path) -> int:
    return subprocess.run([sys.executable, "-c", TRY_OPEN, str(path)], capture_output=True, text=True, timeout=60).returncode


# --- a refused second open keeps the lock -------------------------------------------------


def test_refused_second_open_keeps_the_process_lock(tmp_path):
    path = tmp_path / "s"
    with Store(path) as first:
        with pytest.raises(StoreLockedError):
            Store(path)
        os.symlink(path, tmp_path / "link")
        with pytest.raises(StoreLockedError):  # the same directory by another name
            Store(tmp_path / "link")
        assert other_process_open(path) == 3  # LevelDB's lock still holds
        first.ingest_many(Workload(2, 20))  # and the first Store still works
    assert other_process_open(path) == 0
    with Store(path) as again:  # released on close, in this process too
        assert again.check(check_signatures=False).consistent


# --- a store that lost CURRENT is refused, never wiped ---------------------------------------


def _store_with_tables(path: Path, posts: int = 300) -> set[bytes]:
    with Store(path, now=lambda: NOW) as s:
        s.ingest_many(Workload(4, posts))
        s.db.compact_range()  # data in .ldb tables, as in any store that has run a while
        return {k for k, _ in s.items(b"!post!")}


def test_store_without_current_is_refused_untouched(tmp_path):
    path = tmp_path / "s"
    _store_with_tables(path)
    (path / "CURRENT").unlink()
    before = listing(path)
    with pytest.raises(StoreCorruptError, match="recover"):
        Store(path)
    posts = tmp_path / "posts.bin"
    write_posts(posts, Workload(9, 5))
    assert main(["ingest", str(path), str(posts), "--quiet"]) == 2
    assert main(["check", str(path), "--quiet"]) == 2
    assert listing(path) == before


# --- a LevelDB that is not a cablestore store ---------------------------------------------


def test_foreign_leveldb_is_refused_without_writing(tmp_path, capsys):
    path = tmp_path / "other.ldb"
    db = plyvel.DB(str(path), create_if_missing=True)
    db.put(b"user:1", b"someone else's data")
    db.close()
    write_posts(tmp_path / "posts.bin", Workload(9, 5))
    for argv in (["check", str(path)], ["check", str(path), "--repair"], ["ingest", str(path), str(tmp_path / "posts.bin")]):
        assert main(argv + ["--quiet"]) == 2
        assert "NotAStoreError" in capsys.readouterr().err
    with pytest.raises(NotAStoreError):
        Store(path)
    db = plyvel.DB(str(path))
    assert list(db.iterator()) == [(b"user:1", b"someone else's data")]
    db.close()


# --- wrong paths: accurate messages, nothing created --------------------------------------


def _wrong_paths(tmp_path: Path) -> dict:
    empty = tmp_path / "empty"
    empty.mkdir()
    file = tmp_path / "file.txt"
    file.write_text("not a store\n")
    with Store(tmp_path / "real") as s:
        s.ingest_many(Workload(3, 10))
    snapshot = tmp_path / "snap"
    assert main(["export", str(tmp_path / "real"), str(snapshot), "--quiet"]) == 0
    return {
        tmp_path / "missing": ("StoreNotFoundError", "does not exist"),
        empty: ("StoreNotFoundError", "empty directory"),
        file: ("NotAStoreError", "is a file"),
        snapshot: ("NotAStoreError", "exported snapshot"),
    }


@pytest.mark.parametrize("command", ["check", "rebuild", "export"])
def test_wrong_paths_get_their_own_message_and_stay_untouched(tmp_path, capsys, command):
    cases = _wrong_paths(tmp_path)
    capsys.readouterr()
    for path, (error, text) in cases.items():
        before = listing(path) if path.exists() else None
        argv = [command, str(path)] + ([str(tmp_path / "out")] if command == "export" else ["--engine", "local"])
        assert main(argv + ["--quiet"]) == 2, path
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and error in err and text in err, err
        assert (listing(path) if path.exists() else None) == before, path
        assert not (tmp_path / "out").exists()


def test_store_creates_only_at_a_missing_path_or_in_an_empty_directory(tmp_path):
    (tmp_path / "empty").mkdir()
    for path in (tmp_path / "new", tmp_path / "empty"):
        with Store(path) as s:
            assert s.get(bytes(32)) is None
    with pytest.raises(StoreNotFoundError):
        Store(tmp_path / "absent", create=False)
    assert not (tmp_path / "absent").exists()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    with pytest.raises(NotAStoreError):
        Store(tmp_path / "notes")
    assert sorted(os.listdir(tmp_path / "notes")) == ["todo.txt"]


# --- close while other threads use the store -----------------------------------------------


def close_race(directory: str, rounds: int) -> None:
    """Threads query and ingest while the main thread closes; run in a child process.

    A segfault or any exception other than StoreClosedError makes the child
    fail (the parent sees its exit status).
    """
    import random

    from cablestore.authoring.workload import generate

    posts = generate(seed=8, posts=400)
    rng = random.Random(1)
    for r in range(rounds):
        store = Store(Path(directory) / f"s{r}", now=lambda: NOW, verify_signatures=False)
        store.ingest_many(posts[:100])
        failures, ended = [], []

        def reader(store=store, failures=failures, ended=ended):
            try:
                while True:
                    store.channel_time_range("general", limit=20)
                    store.channel_state("general", historic=True)
                    store.get_many([bytes(32)] * 4)
                    for _ in store.items(b"!post!"):
                        pass
                    for _ in store.posts():  # a generator method: guarded step by step
                        pass
                    len(store)
            except StoreClosedError:
                ended.append(1)
            except BaseException as exc:  # noqa: BLE001 - what this test hunts for
                failures.append(repr(exc))

        def writer(store=store, failures=failures, ended=ended):
            try:
                for i in range(100, 400, 10):
                    store.ingest_many(posts[i : i + 10])
                while True:
                    store.delete(bytes(32))
            except StoreClosedError:
                ended.append(1)
            except BaseException as exc:  # noqa: BLE001
                failures.append(repr(exc))

        threads = [threading.Thread(target=f) for f in (reader, reader, reader, writer)]
        for t in threads:
            t.start()
        time.sleep(rng.uniform(0, 0.05))
        store.close()
        for t in threads:
            t.join(10)
        assert not any(t.is_alive() for t in threads), f"round {r}: a thread is stuck"
        assert failures == [], f"round {r}: {failures}"
        assert len(ended) == 4
    print("ok", rounds)


def test_close_while_threads_query_and_ingest_never_crashes(tmp_path):
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from tests.test_lifecycle import close_race; close_race(sys.argv[1], 25)"
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"exit {out.returncode}: {out.stderr[-2000:]}"
    assert "ok 25" in out.stdout


def test_close_waits_for_a_call_in_flight(tmp_path, alice):
    from .test_store import text

    store = Store(tmp_path / "s", now=lambda: NOW)
    inside, release = threading.Event(), threading.Event()

    def slow_listener(_committed):
        inside.set()
        release.wait(10)

    store.subscribe(slow_listener)
    ingester = threading.Thread(target=store.ingest, args=(text(alice, 1),))
    ingester.start()
    assert inside.wait(10)
    closer = threading.Thread(target=store.close)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive()  # still waiting for the ingest
    with pytest.raises(StoreClosedError):  # no new calls meanwhile
        store.get(bytes(32))
    release.set()
    ingester.join(10)
    closer.join(10)
    assert not closer.is_alive()
    with pytest.raises(StoreClosedError):
        store.items()


def test_every_call_after_close_raises_store_closed(tmp_path, alice):
    from .test_store import text

    store = Store(tmp_path / "s", now=lambda: NOW)
    store.ingest(text(alice, 1))
    it = store.items()
    next(it)
    posts = store.posts()
    next(posts)
    store.close()
    store.close()  # twice is fine
    calls = [
        lambda: store.ingest(text(alice, 2)),
        lambda: store.ingest_many([text(alice, 3)]),
        lambda: store.get(bytes(32)),
        lambda: bytes(32) in store,
        lambda: store.channel_state("general"),
        lambda: store.channel_list(),
        lambda: store.check(),
        lambda: store.delete(bytes(32)),
        lambda: next(it),  # an iterator made before close
        lambda: next(posts),  # a generator made before close
        lambda: len(store),
    ]
    for call in calls:
        with pytest.raises(StoreClosedError):
            call()


def test_every_public_store_method_is_guarded():
    """Every public method (mixed in from any module) passes through the gate close() waits on."""
    from cablestore.store.lifecycle.inflight import UNGUARDED

    unguarded = [
        name
        for name, member in inspect.getmembers(Store)
        if not name.startswith("_") and name not in UNGUARDED and inspect.isfunction(member) and not getattr(member, "__guarded__", False)
    ]
    assert unguarded == []
    assert {"get", "ingest", "check", "items", "links", "posts", "__len__"} <= {n for n, m in inspect.getmembers(Store) if getattr(m, "__guarded__", False)}


def test_errors_are_cable_errors():
    for cls in (StoreNotFoundError, NotAStoreError, StoreCorruptError, StoreClosedError, StoreLockedError):
        assert issubclass(cls, CableError)


def test_a_store_whose_creation_was_cut_short_opens_as_new(tmp_path):
    """A SIGKILL between LevelDB's first MANIFEST and its CURRENT left a directory no open accepted (crash harness)."""
    import shutil

    made = tmp_path / "made"
    with Store(made):
        pass
    cut = tmp_path / "cut"
    cut.mkdir()
    for name in ("LOCK", "LOG"):
        (cut / name).write_bytes(b"")
    manifest = next(p for p in made.iterdir() if p.name.startswith("MANIFEST-"))
    shutil.copy(manifest, cut / "MANIFEST-000001")
    (cut / "000001.dbtmp").write_bytes(b"MANIFEST-000001\n")
    with Store(cut, now=lambda: 1) as s:
        assert len(s) == 0
    with Store(cut, create=False) as s:  # and it is a store now
        assert s.stats().posts == 0


def test_tables_are_written_uncompressed_and_a_store_of_snappy_tables_reads_on(tmp_path, monkeypatch):
    """New tables hold posts verbatim (no Snappy); tables an older release compressed still read, and compact into new ones."""
    from cablestore.store.lifecycle import opening

    posts = list(Workload(3, 400))
    path = tmp_path / "s"
    monkeypatch.setattr(opening, "COMPRESSION", "snappy")  # as releases before it wrote
    with Store(path, now=lambda: NOW) as store:
        store.ingest_many(posts[:200])
        store.db.compact_range()
        held_before = [p for p in posts[:200] if store.get(post_hash(p)) == p]
    monkeypatch.undo()
    assert opening.COMPRESSION is None
    snappy_tables = b"".join(f.read_bytes() for f in path.glob("*.ldb"))
    assert not all(p in snappy_tables for p in held_before)  # Snappy replaced repeated keys inside posts
    with Store(path, now=lambda: NOW) as store:
        assert all(store.get(post_hash(p)) == p for p in held_before)
        store.ingest_many(posts[200:])
        store.db.compact_range()
        held = [p for p in posts if store.get(post_hash(p)) == p]
    assert len(held) > 300
    tables = b"".join(f.read_bytes() for f in path.glob("*.ldb"))
    assert all(p in tables for p in held)  # every post's bytes verbatim: the compacted tables are uncompressed
