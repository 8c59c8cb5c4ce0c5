"""`cablestore web` on a store no process serves takes no lock: writers work beside it, and its pages follow them.

The archive reads copies of consistent states of the store's files
(cablestore.store.lifecycle.readonly.copy_state, cablestore.web.follow.Followed).
Real processes for the command; in-process writers for the states.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from cablestore import Store
from cablestore.authoring.workload import generate
from cablestore.errors import StoreNotFoundError
from cablestore.store.lifecycle.readonly import copy_state, state
from cablestore.web.follow import Followed
from cablestore.wire.codec import BLOCK, DELETE, post_type_of

from .conftest import stop

CLI = [sys.executable, "-m", "cablestore"]
SHOWN_WITHIN = 10.0  # seconds: a post appears on the page within this


def cli(*args):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=60)


def start(argv, port_file, proc_list, env=None):
    proc = subprocess.Popen([*CLI, *map(str, argv)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    proc_list.append(proc)
    deadline = time.monotonic() + 30
    while not port_file.exists() or not port_file.read_text().strip():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() is not None else "no port file"
        time.sleep(0.05)
    return int(port_file.read_text())


def page(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
        assert r.status == 200
        return r.read().decode()


def test_post_and_serve_work_beside_web_and_the_page_shows_the_post(tmp_path):
    store, key = tmp_path / "s.ldb", tmp_path / "me.key"
    assert cli("keygen", key).returncode == 0
    assert cli("post", store, "--key", key, "text", "general", "before the archive").returncode == 0
    procs: list[subprocess.Popen] = []
    tmp = tmp_path / "tmp"  # the archive's TMPDIR: where its copies of the store go
    tmp.mkdir()
    try:
        port = start(["web", store, "--listen", "127.0.0.1:0", "--port-file", tmp_path / "web.port"], tmp_path / "web.port", procs,
                     env={**os.environ, "TMPDIR": str(tmp)})
        assert "before the archive" in page(port, "/channel/%23general")
        posted = cli("post", store, "--key", key, "text", "general", "written beside the archive")
        assert posted.returncode == 0, posted.stderr  # the archive holds no lock
        began = time.monotonic()
        while "written beside the archive" not in page(port, "/channel/general"):
            assert time.monotonic() - began < SHOWN_WITHIN, "the new post never appeared"
            time.sleep(0.2)
        assert "read without locking it" in page(port, "/status") and f"<code>{store}</code>" in page(port, "/status")
        start(["serve", store, "--listen", "127.0.0.1:0", "--port-file", tmp_path / "serve.port", "--quiet"], tmp_path / "serve.port", procs)
        through = cli("post", store, "--key", key, "text", "general", "through serve")  # runs in the serving process
        assert through.returncode == 0, through.stderr
        began = time.monotonic()
        while "through serve" not in page(port, "/channel/general"):
            assert time.monotonic() - began < SHOWN_WITHIN, "the served post never appeared"
            time.sleep(0.2)
        assert any(name.startswith("cablestore-web-") for name in os.listdir(tmp))
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                assert stop(proc) == 0, proc.stderr.read()
    assert os.listdir(tmp) == []  # every copy removed at the end


@pytest.mark.parametrize("link", [True, False], ids=["hard links", "copies"])
def test_each_state_copied_beside_a_writer_is_consistent_and_none_goes_back(tmp_path, link):
    """A writer ingests, flushes and compacts (a 1 MB memtable) while states are copied and opened: each is a prefix of its writes."""
    posts = [p for p in generate(seed=11, posts=6000) if post_type_of(p) not in (DELETE, BLOCK)]  # each batch adds, none takes away
    path = tmp_path / "w.ldb"
    with Store(path, write_buffer_mb=1) as writer:
        writer.ingest_many(posts[:200])
        first = writer.stats().posts
        done = threading.Event()

        def write():
            try:
                for i in range(200, len(posts), 100):
                    writer.ingest_many(posts[i : i + 100])
            finally:
                done.set()

        thread = threading.Thread(target=write)
        thread.start()
        counts: list[int] = []

        def look(check: bool) -> None:
            into = tmp_path / f"state{len(counts)}"
            into.mkdir()
            copy_state(path, into, link=link)
            with Store(into, readonly=True) as seen:
                counts.append(seen.stats().posts)
                assert not check or seen.check().consistent

        try:
            while not done.is_set():
                look(check=len(counts) % 4 == 0)
        finally:
            thread.join()
        look(check=True)  # after the last write: all of it
        total = writer.stats().posts
    assert counts == sorted(counts) and counts[0] >= first and counts[-1] == total
    assert len(set(counts)) >= 3, counts  # states taken while the writer wrote, not only before and after


def test_a_followed_store_keeps_a_page_on_its_state_and_copies_only_new_tables(tmp_path):
    """Copies (no hard links to the store): a renewal reuses the previous state's tables, and a page's state outlives it."""
    path = tmp_path / "f.ldb"
    posts = list(generate(seed=3, posts=300))
    with Store(path) as writer:
        writer.ingest_many(posts[:150])
        writer.db.compact_range()  # the posts in tables, the log empty
        before = writer.stats().posts
        followed = Followed(path, check_every=0, link=False)
        try:
            first_dir = followed._current.directory
            tables = [n for n in os.listdir(first_dir) if n.endswith(".ldb")]
            assert tables and all(os.stat(first_dir / n).st_ino != os.stat(path / n).st_ino for n in tables)  # copies
            with followed.lease() as (old, _):
                assert old.stats().posts == before
                writer.ingest_many(posts[150:])
                after = writer.stats().posts
                assert state(path) != followed._current.state
                with followed.lease() as (new, _):  # a look at the files on the way in: the new state
                    assert new.stats().posts == after > before and new is not old
                    second_dir = followed._current.directory
                    assert all(os.stat(second_dir / n).st_ino == os.stat(first_dir / n).st_ino for n in tables)  # reused
                assert old.stats().posts == before and first_dir.is_dir()  # the page still reads its state
            assert not first_dir.exists() and old.closed  # removed once no page read it
            assert followed.refresh() is False  # nothing changed since
        finally:
            followed.close()
        assert not second_dir.exists()


def test_following_a_missing_store_names_it(tmp_path):
    with pytest.raises(StoreNotFoundError, match=str(tmp_path / "none")):
        Followed(tmp_path / "none")
    assert not (tmp_path / "none").exists()
