"""The library as a newcomer meets it: a wrong argument is a CableError that names it, before anything is written."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cablestore import ArgumentError, CableError, Keypair, QueryError, Store, StoreExistsError, post_hash
from cablestore.authoring.author import Author
from cablestore.authoring.workload import generate, read_posts, write_posts

from .conftest import NOW, dump, keypair


@pytest.fixture(scope="module")
def posts():
    return generate(seed=21, posts=300)


@pytest.fixture
def filled(store, posts):
    store.ingest_many(posts)
    return store


# --- limits beyond any count --------------------------------------------------


@pytest.mark.parametrize("limit", [10**30, sys.maxsize + 1, (1 << 64) + 5])
def test_a_limit_beyond_any_count_means_all(filled, limit):
    everything = filled.channel_time_range("general")
    assert len(everything) > 10
    assert filled.channel_time_range("general", limit=limit) == everything
    assert [m.hash for m in filled.messages("general", limit=limit)] == everything
    assert filled.channel_list(limit=limit) == filled.channel_list()


@pytest.mark.parametrize("bad", [True, -1, 1.5, "3"])
def test_a_limit_that_is_not_a_count_is_a_query_error(filled, bad):
    with pytest.raises(QueryError, match="limit must be a non-negative integer"):
        filled.channel_time_range("general", limit=bad)


# --- ingest -------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["str", None, 5, ["list"], 1.0])
def test_ingest_of_something_that_is_not_bytes_is_an_argument_error(filled, bad):
    before = dump(filled)
    with pytest.raises(ArgumentError, match="a post is bytes") as exc:
        filled.ingest(bad)
    assert isinstance(exc.value, CableError) and isinstance(exc.value, TypeError)
    assert dump(filled) == before


def test_ingest_takes_bytearray_and_memoryview(store, posts):
    assert store.ingest(bytearray(posts[0])) == post_hash(posts[0])
    assert store.ingest(memoryview(posts[1])) == post_hash(posts[1])


@pytest.mark.parametrize("bad", [b"abc", "abc", bytearray(b"abc"), None, 7])
def test_ingest_many_of_one_buffer_or_a_non_iterable_is_refused(store, bad):
    with pytest.raises(ArgumentError, match="ingest_many takes an iterable of posts"):
        store.ingest_many(bad)
    assert len(store) == 0


def test_ingest_many_with_a_non_bytes_item_ingests_nothing(store, posts):
    before = dump(store)
    with pytest.raises(ArgumentError, match="post 2 of ingest_many is str"):
        store.ingest_many([posts[0], posts[1], "third"])
    assert dump(store) == before
    assert [r.ok for r in store.ingest_many(iter(posts[:2]))] == [True, True]  # a generator still works


# --- opening a store ------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(cache_mb=-1), "cache_mb must be from 0"),
        (dict(cache_mb=1 << 40), "cache_mb must be from 0"),
        (dict(write_buffer_mb=0), "write_buffer_mb must be from 1"),
        (dict(cache_mb="32"), "cache_mb must be an integer"),
        (dict(verify_workers=-3), "verify_workers must be from 0"),
        (dict(verify_workers=True), "verify_workers must be an integer"),
        (dict(now=5), "now must be a callable"),
    ],
)
def test_bad_store_options_are_refused_before_the_directory_is_made(tmp_path, kwargs, match):
    path = tmp_path / "s.ldb"
    with pytest.raises(ArgumentError, match=match):
        Store(path, **kwargs)
    assert not path.exists()


def test_the_bounds_of_the_store_options_are_accepted(tmp_path):
    with Store(tmp_path / "low", cache_mb=0, write_buffer_mb=1, verify_workers=0, now=None) as s:
        assert s.channel_list() == []


@pytest.mark.parametrize("bad", [123, None, "", 1.5, "a\0b", "\ud800x"])  # the last two: no file system takes them
def test_a_store_path_that_is_no_path_is_an_argument_error(tmp_path, bad, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ArgumentError, match="store path"):
        Store(bad)
    assert os.listdir(tmp_path) == []


def test_a_bytes_store_path_is_a_path(tmp_path):
    with Store(os.fsencode(tmp_path / "b.ldb")) as s:
        assert s.path == tmp_path / "b.ldb"


def test_a_store_path_that_is_not_utf8_opens_and_is_reopened(tmp_path, posts):
    """Regression: plyvel refused such a name with a raw ValueError, after the directory was made."""
    path = os.fsencode(tmp_path) + b"/bad\xff.ldb"
    with Store(path) as s:
        s.ingest_many(posts[:5])
    with Store(path) as s:
        assert len(list(s.items(b"!post!"))) == 5
    assert os.listdir(os.fsencode(tmp_path)) == [b"bad\xff.ldb"]


def test_a_bad_local_user_creates_no_store(tmp_path):
    """Regression: the store was created, then the key refused."""
    from cablestore import LocalUserError

    with pytest.raises(LocalUserError):
        Store(tmp_path / "n.ldb", local_user="zz")
    assert not (tmp_path / "n.ldb").exists()


def test_an_io_error_at_open_is_not_called_a_lock_because_the_path_says_lock(tmp_path):
    """Regression: any I/O error at open whose message held "lock" (the LOCK file's own name) was a StoreLockedError."""
    from cablestore import StoreIOError, StoreLockedError

    path = tmp_path / "s.ldb"
    Store(path).close()
    (path / "LOCK").unlink()
    (path / "LOCK").mkdir()  # LevelDB cannot open it: "<path>/LOCK: Is a directory"
    with pytest.raises(CableError) as info:
        Store(path)
    assert not isinstance(info.value, StoreLockedError) and isinstance(info.value, StoreIOError), info.value


def test_moderation_queries_of_a_channel_that_is_not_unicode_are_query_errors(store):
    """Regression: roles() and hidden_users() let a raw UnicodeEncodeError out."""
    for query in (store.roles, store.hidden_users):
        with pytest.raises(QueryError, match="not valid Unicode"):
            query("\udcff")


# --- keys and authors -------------------------------------------------------------


@pytest.mark.parametrize("seed, match", [(b"short", "a seed is 32 bytes, got 5"), ("x" * 32, "not str"), (None, "not NoneType"), (bytes(33), "got 33")])
def test_keypair_from_a_bad_seed_is_an_argument_error(seed, match):
    with pytest.raises(ArgumentError, match=match):
        Keypair.from_seed(seed)


def test_keypair_from_a_bytearray_seed_is_the_bytes_seed():
    assert Keypair.from_seed(bytearray(b"\x07" * 32)).public_key == Keypair.from_seed(b"\x07" * 32).public_key


def test_author_checks_its_arguments_at_once(store, tmp_path):
    with pytest.raises(ArgumentError, match="Author needs a Keypair, not str"):
        Author(store, "me.key")
    with pytest.raises(ArgumentError, match="Author needs an open Store, not str"):
        Author(str(tmp_path / "s.ldb"), keypair("alice"))
    with pytest.raises(ArgumentError, match="now must be a callable"):
        Author(store, keypair("alice"), now=NOW)
    assert not (tmp_path / "s.ldb").exists() and len(store) == 0


# --- channels -----------------------------------------------------------------------


def test_channels_sums_up_every_channel_as_the_queries_do(filled):
    summaries = filled.channels()
    assert [c.name for c in summaries] == filled.channel_list() and len(summaries) >= 3
    for c in summaries:
        assert c.topic == filled.topic(c.name)
        assert c.members == len(filled.members(c.name))
        assert c.messages == len(filled.channel_time_range(c.name))
        assert c.spelling == filled.listed_spellings([c.name])[0]
        assert c.to_dict() == {"name": c.name, "spelling": c.spelling, "topic": c.topic, "members": c.members, "messages": c.messages}


def test_channels_of_an_empty_store(store):
    assert store.channels() == []


# --- posts files --------------------------------------------------------------------


def _interrupted(bufs, after):
    for i, buf in enumerate(bufs):
        if i == after:
            raise KeyboardInterrupt
        yield buf


def test_an_interrupted_write_leaves_no_file(tmp_path, posts):
    path = tmp_path / "posts.bin"
    with pytest.raises(KeyboardInterrupt):
        write_posts(path, _interrupted(posts, 100))
    assert os.listdir(tmp_path) == []  # neither the file nor its temporary


def test_an_interrupted_write_keeps_the_file_that_was_there(tmp_path, posts):
    path = tmp_path / "posts.bin"
    assert write_posts(path, posts[:10]) == 10
    with pytest.raises(KeyboardInterrupt):
        write_posts(path, _interrupted(posts, 100))
    assert read_posts(path) == posts[:10] and os.listdir(tmp_path) == ["posts.bin"]
    assert write_posts(path, posts) == len(posts) and read_posts(path) == posts


def test_a_posts_file_gets_the_usual_permissions(tmp_path, posts):
    umask = os.umask(0o022)
    try:
        write_posts(tmp_path / "p.bin", posts[:3])
    finally:
        os.umask(umask)
    assert (tmp_path / "p.bin").stat().st_mode & 0o777 == 0o644


# --- the demo ---------------------------------------------------------------------------


def test_the_demo_never_writes_into_an_existing_store(filled):
    from cablestore.demo import run_demo

    before = dump(filled)
    lines: list[str] = []
    with pytest.raises(StoreExistsError, match="holds a store already"):
        run_demo(filled.path, posts=50, engine="local", out=lines.append)
    assert lines == [] and dump(filled) == before


# --- worker processes and scripts without a main guard ------------------------------------

SCRIPT = """\
import sys
from cablestore import Store
from cablestore.authoring.workload import generate

print("script body", flush=True)
with Store(sys.argv[1], verify_workers=2) as store:
    results = store.ingest_many(generate(seed=5, posts=1200))
    print("accepted", sum(r.ok for r in results), flush=True)
    print("consistent", store.check(verify_workers=1).consistent, flush=True)
"""


def test_verify_workers_in_a_script_without_a_main_guard(tmp_path):
    """The workers never import the script: it runs once, opens its store once, prints no traceback."""
    script = tmp_path / "unguarded.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "s.ldb")], cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.stderr == "" and proc.returncode == 0
    assert proc.stdout.splitlines() == ["script body", "accepted 1200", "consistent True"]


def test_worker_pool_results_in_order_and_a_dead_worker_breaks_it():
    from concurrent.futures.process import BrokenProcessPool

    from cablestore.wire.crypto import _verify_chunk, verify_many
    from cablestore.workers import WorkerPool

    posts = generate(seed=8, posts=700)
    forged = [p[:-1] + bytes([p[-1] ^ 1]) for p in posts[::7]]
    mixed = [b for pair in zip(posts[::7], forged, strict=True) for b in pair] + posts
    pool = WorkerPool(2)  # the processes verify_pool hands out when the compiled verifier is missing
    procs = []
    try:
        first, second = verify_many(mixed, pool), verify_many(posts, pool)  # two batches in flight at once
        assert list(second) == [True] * len(posts)
        assert list(first) == [i % 2 == 0 for i in range(2 * len(forged))] + [True] * len(posts)
        abandoned = pool.map(_verify_chunk, [posts[:10]] * 6)
        next(abandoned)
        del abandoned  # its other answers are dropped, not handed to the next call
        assert list(pool.map(_verify_chunk, [forged[:3]])) == [[False] * 3]
        procs = list(pool._procs)
        for w in procs:
            w.proc.kill()
        with pytest.raises(BrokenProcessPool):
            list(pool.map(_verify_chunk, [posts[:2]] * 4))
        assert list(verify_many(posts, pool)) == [True] * len(posts)  # the caller falls back to verifying itself
    finally:
        pool.shutdown()
    assert len(procs) == 2 and all(w.proc.poll() is not None for w in procs)


def test_closing_a_store_stops_its_workers(tmp_path):
    from cablestore.wire.crypto import THREADED

    posts = generate(seed=9, posts=600)
    with Store(tmp_path / "s", verify_workers=2, now=lambda: NOW) as s:
        assert all(r.ok for r in s.ingest_many(posts))
        pool = s._ingest.verify_pool
        if THREADED:  # the compiled checker's threads
            assert 1 <= pool.running <= 2
        else:
            procs = [w.proc for w in pool._procs]
    if THREADED:
        assert pool.running == 0 and s._ingest.verify_pool is None
    else:
        assert len(procs) == 2 and all(p.poll() is not None for p in procs)


# --- channel names: one channel per canonical caseless name -----------------------------------


def test_a_channel_name_that_casefolds_longer_keeps_its_tombstones(store):
    """64 "ß" are a valid name (64 codepoints) that casefolds to 128: its delete's tombstone is no damage."""
    from cablestore import DELETE, TEXT, make_post

    alice = keypair("alice")
    text = make_post(alice, TEXT, NOW - 10, channel="ß" * 64, text="x")[0]
    delete = make_post(alice, DELETE, NOW - 5, hashes=(post_hash(text),))[0]
    store.ingest(text)
    store.ingest(delete)
    assert store.is_deleted(post_hash(text)) and store.channel_time_range("SS" * 64) == [post_hash(delete)]
    report = store.check()
    assert report.consistent and report.faults == []


OLD_RULE = """\
import sys
import cablestore.keyspace.keys as keys
from cablestore import Store

# Key channels as 0.1.0 did (casefold alone): every module's reference to the rule is replaced.
new = keys.canonical_channel
for module in list(sys.modules.values()):
    if getattr(module, "canonical_channel", None) is new:
        setattr(module, "canonical_channel", str.casefold)
with Store(sys.argv[1], now=lambda: int(sys.argv[2])) as store:
    results = store.ingest_many([bytes.fromhex(h) for h in sys.argv[3:]])
    assert all(r.ok for r in results), results
    print(len(store.channel_list()))
"""


def test_a_store_keyed_by_the_old_rule_is_reported_and_reindexed(tmp_path):
    import unicodedata

    from cablestore import DELETE, TEXT, make_post
    from cablestore.rebuild.reindex import reindex

    nfc, nfd = unicodedata.normalize("NFC", "Café-Ünïcode"), unicodedata.normalize("NFD", "café-ünïcode")
    alice, bob = keypair("alice"), keypair("bob")
    a = make_post(alice, TEXT, NOW - 30, channel=nfc, text="composed")[0]
    b = make_post(bob, TEXT, NOW - 20, channel=nfd, text="decomposed")[0]
    b2 = make_post(bob, TEXT, NOW - 15, channel=nfd, text="gone")[0]
    gone = make_post(bob, DELETE, NOW - 10, hashes=(post_hash(b2),))[0]
    # Written by a process that keys as 0.1.0 did (pure Python, so the rule is the module's).
    old = subprocess.run([sys.executable, "-c", OLD_RULE, str(tmp_path / "old"), str(NOW), *(x.hex() for x in (a, b, b2, gone))],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "CABLESTORE_PURE": "1"})
    assert old.returncode == 0 and old.stdout == "2\n", old.stderr  # the old rule: two channels
    with Store(tmp_path / "old", now=lambda: NOW) as s:
        assert s.is_deleted(post_hash(b2))  # the old tombstone reads, canonicalized
        before = s.check()
        assert not before.consistent and before.faults == []  # view keys to rewrite, no damage
        reindex(s)
        after = s.check()
        assert after.consistent and after.faults == []
        assert s.channel_list() == [unicodedata.normalize("NFC", "café-ünïcode")]
        assert s.channel_time_range(nfd) == [post_hash(gone), post_hash(b), post_hash(a)]
    with Store(tmp_path / "new", now=lambda: NOW) as fresh:
        fresh.ingest_many([a, b, b2, gone])
        with Store(tmp_path / "old") as s:
            views = [kv for kv in s.items() if not kv[0].startswith((b"!deleted!", b"!local!"))]
        assert views == [kv for kv in fresh.items() if not kv[0].startswith((b"!deleted!", b"!local!"))]


def test_ingest_batches_holds_a_bounded_number_of_batches(tmp_path):
    """The workers verify VERIFY_AHEAD batches ahead, no more: memory is bounded however long the input."""
    from cablestore.store.store import VERIFY_AHEAD

    posts = generate(seed=10, posts=400)
    pulled = 0

    def batches():
        nonlocal pulled
        for i in range(0, len(posts), 20):
            pulled += 1
            yield posts[i : i + 20]

    with Store(tmp_path / "s", verify_workers=1, now=lambda: NOW) as s:
        yielded = 0
        for results in s.ingest_batches(batches()):
            yielded += 1
            assert all(r.ok for r in results)
            assert pulled - yielded <= VERIFY_AHEAD  # held: the one just yielded and those verifying ahead
        assert yielded == pulled == 20
        piped = list(s.items())
    with Store(tmp_path / "plain", now=lambda: NOW) as s:
        s.ingest_many(posts)
        assert list(s.items()) == piped
