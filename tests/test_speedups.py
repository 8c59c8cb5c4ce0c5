"""The compiled hot path (cablestore._speedups) and pure Python give the same bytes.

Each compiled function is compared with its pure original on generated
posts (hypothesis), and whole stores built both ways from generated
workloads are compared key by key, after ingest and after a reindex.  The
pure path is selected in-process by pointing each module back at its pure
original (what ``CABLESTORE_PURE=1`` does at import); one test also runs
the CLI with ``CABLESTORE_PURE=1`` to check the switch itself.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cablestore import Store, compiled
from cablestore.authoring.workload import Workload
from cablestore.errors import CableError
from cablestore.keyspace import records
from cablestore.keyspace.records import Indexed, Tombstone
from cablestore.rebuild import batchwriter as batchwriter_mod
from cablestore.rebuild import fold as fold_mod
from cablestore.rebuild import reindex as reindex_mod
from cablestore.rebuild.fold import Fold
from cablestore.rebuild.reindex import reindex
from cablestore.store.write import hashfilter as hashfilter_mod
from cablestore.store.write import txn as txn_mod
from cablestore.wire import codec
from cablestore.wire.codec import DELETE, INFO, JOIN, LEAVE, TEXT, TOPIC, post_hash

from .conftest import keypair, post

pytestmark = pytest.mark.skipif(not compiled.COMPILED, reason="the compiled extension is not built (pure Python run)")
native = compiled.native
views = sys.modules["cablestore.views"]
links_view = sys.modules["cablestore.views.links"]
recon_view = sys.modules["cablestore.views.recon"]

NOW = 1_900_000_000_000
KEYS = [keypair(f"speedups-{i}") for i in range(3)]
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

chars = st.characters(blacklist_categories=("Cs",))
channels = st.one_of(st.text(chars, min_size=1, max_size=64), st.sampled_from(["general", "Dev-Talk", "a\x00b", "ß" * 64, "😀" * 64]))
texts = st.text(chars, max_size=300)
timestamps = st.one_of(st.integers(0, 200), st.integers(0, 2**16 + 5), st.integers(0, 2**33), st.integers(0, 2**64 - 1))
hashes = st.binary(min_size=32, max_size=32)
link_lists = st.lists(st.one_of(hashes, st.sampled_from([b"\x01" * 32, b"\x02" * 32])), max_size=4)


@st.composite
def posts(draw):
    """A signed post of any of types 0-5 (or a few moderation posts), with varied fields."""
    kp = draw(st.sampled_from(KEYS))
    t = draw(st.sampled_from([TEXT, TEXT, INFO, TOPIC, JOIN, LEAVE, DELETE, 7]))
    ts, links = draw(timestamps), draw(link_lists)
    if t == TEXT:
        return post(kp, t, ts, links, channel=draw(channels), text=draw(texts))
    if t == TOPIC:
        return post(kp, t, ts, links, channel=draw(channels), topic=draw(texts))
    if t in (JOIN, LEAVE):
        return post(kp, t, ts, links, channel=draw(channels))
    if t == INFO:
        pairs = draw(st.lists(st.tuples(st.sampled_from(["name", "x"]), st.text(chars, min_size=1, max_size=20)), max_size=3))
        pairs += draw(st.lists(st.tuples(st.just("accept-role"), st.sampled_from([0, 1])), max_size=1))
        return post(kp, t, ts, links, info=pairs)
    if t == DELETE:
        return post(kp, t, ts, links, hashes=draw(st.lists(hashes, min_size=1, max_size=3)))
    return post(kp, 7, ts, links, reason="", privacy=0, channel="general", recipients=[KEYS[1].public_key], action=2)


def _outcome(decode, buf):
    try:
        return decode(buf)
    except CableError as exc:
        return (type(exc), str(exc))


@FAST
@given(posts(), st.data())
def test_decode_matches_pure_on_posts_and_mutations(buf, data):
    assert native.decode_post(buf) == codec.decode_post_py(buf)
    # Any byte changed, cut or added: the same post or the same error.
    mutated = bytearray(buf)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(96, len(mutated) - 1)) if len(mutated) > 96 else 0
        mutated[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf) + 2))
    for candidate in (bytes(mutated), buf[:cut], buf + b"\x00"):
        assert _outcome(native.decode_post, candidate) == _outcome(codec.decode_post_py, candidate)


@FAST
@given(st.binary(min_size=96, max_size=200))
def test_decode_matches_pure_on_random_bytes(buf):
    assert _outcome(native.decode_post, buf) == _outcome(codec.decode_post_py, buf)


def _pure_indexed(buf, p, h, tombstones=()):
    saved, records._new_indexed = records._new_indexed, None
    try:
        return Indexed.of(buf, p, h, tombstones)
    finally:
        records._new_indexed = saved


@FAST
@given(posts())
def test_entries_and_groups_match_pure(buf):
    p, h = codec.decode_post_py(buf), post_hash(buf)
    made = ()
    if p.post_type == DELETE:
        made = tuple(Tombstone(t, h, p.public_key, channels=("general", "ünï")) for t in p.hashes)
    ip = native.new_indexed(h, p, made)
    pure = _pure_indexed(buf, p, h, made)
    assert ip == pure and type(ip) is Indexed
    assert native.entries(ip) == views.entries_py(pure)
    assert native.groups(ip) == views.groups_py(pure)
    assert native.mono(p.timestamp, h) == pure.mono
    # The range sums' finest buckets: the same from pairs and bare keys, added and taken away, in view order or not.
    entries = views.entries_py(pure)
    damaged = [recon_view.PREFIX, views.chat.PREFIX + b"short"] + entries
    cases = ((1, entries, True), (-1, [k for k, _ in entries], False), (1, entries + entries[:1], False), (1, damaged, True))
    for sign, rows, ordered in cases:
        fast, slow = {b"\xff": bytearray(40)}, {b"\xff": bytearray(40)}
        native.recon_add(fast, p.post_type, rows, sign, ordered)
        recon_view.add_py(slow, p.post_type, rows, sign, ordered)
        assert fast == slow


@FAST
@given(
    st.lists(st.tuples(st.sampled_from([b"a", b"general", b"x\x00y"]), timestamps, hashes, st.sampled_from([1, 1, -1])), max_size=8),
    st.data(),
)
def test_range_sum_rows_match_pure(posts_added, data):
    """A batch's !recon rows, from the same sums and committed values (some cached, some damaged): the same writes."""
    from cablestore.keyspace import keys

    fine: dict = {}
    for channel, ts, h, sign in posts_added:
        recon_view.add_py(fine, TEXT, [keys.CHAT + channel + ts.to_bytes(8, "big") + h], sign)
    rows = list(recon_view.expand(fine))
    committed = {}
    for row in rows:
        kind = data.draw(st.sampled_from(["none", "value", "damaged"]))
        if kind == "value":
            committed[row] = recon_view.encode(data.draw(st.integers(0, 2**256 - 1)), data.draw(st.integers(1, 9)))
        elif kind == "damaged":
            committed[row] = b"\x00" * data.draw(st.sampled_from([0, 39, 41]))
    cached = None if data.draw(st.booleans()) else {row: committed.get(row) for row in rows if data.draw(st.booleans())}
    results = []
    for write_rows in (native.recon_write, recon_view.write_rows_py):
        writes, written = {}, {}
        write_rows({k: bytearray(v) for k, v in fine.items()}, cached, committed.get, writes, written)
        results.append((writes, written))
    assert results[0] == results[1]
    assert results[0][0] == results[0][1]


@FAST
@given(st.lists(posts(), min_size=1, max_size=8), st.sampled_from([None, "some"]), st.integers(1, 64))
def test_fold_digests_match_pure(bufs, wanted, parts):
    pairs = []
    for buf in bufs:
        ip = _pure_indexed(buf, codec.decode_post_py(buf), post_hash(buf))
        pairs += views.entries_py(ip) + [(b"nobang", b"v"), (b"!", b"")]
    a, b = Fold(parts), Fold(parts)
    if wanted:
        buckets = frozenset(("chat", i) for i in range(parts)) | frozenset(("unknown", i) for i in range(parts))
        a.wanted = b.wanted = buckets
    a.add_entries(pairs)
    b.add_entries_py(pairs)
    assert a.digests == b.digests and a.entries == b.entries


# They bind their compiled twins at import, then call them through a name pure_path points back.
_BOUND_AT_IMPORT = {"cablestore.wire.codec", "cablestore.keyspace.records", "cablestore.views.recon"}


def _compiled_names() -> list[str]:
    """Module globals of cablestore that still reach the compiled extension."""
    out = []
    for name, mod in list(sys.modules.items()):
        if not name.startswith("cablestore") or name in ("cablestore._speedups", "cablestore.compiled"):
            continue
        for attr, value in list(vars(mod).items()):
            if (attr == "_native" and name in _BOUND_AT_IMPORT) or (name == "cablestore" and attr == "_speedups"):
                continue
            if value is native or getattr(value, "__module__", None) == "cablestore._speedups":
                out.append(f"{name}.{attr}")
    return out


@contextmanager
def pure_path(monkeypatch):
    """Point every module back at its pure original, as CABLESTORE_PURE=1 does at import."""
    with monkeypatch.context() as m:
        m.setattr(codec, "_decode", codec.decode_post_py)
        m.setattr(records, "_new_indexed", None)
        m.setattr(views, "entries", views.entries_py)
        m.setattr(views, "groups", views.groups_py)
        m.setattr(recon_view, "add", recon_view.add_py)
        m.setattr(recon_view, "write_rows", recon_view.write_rows_py)
        m.setattr(views, "_native", None)
        m.setattr(fold_mod, "_native", None)
        m.setattr(reindex_mod, "_native", None)
        m.setattr(txn_mod, "_native", None)
        m.setattr(hashfilter_mod, "_native", None)
        m.setattr(batchwriter_mod, "_native", None)
        assert not _compiled_names(), "modules still on the compiled path"
        yield


def _build(path, bufs, batch: int) -> tuple[list, list]:
    with Store(path, now=lambda: NOW) as store:
        for i in range(0, len(bufs), batch):
            store.ingest_many(bufs[i : i + batch])
        ingested = list(store.items())
        reindex(store)
        check = store.check()
        assert check.consistent, check
        return ingested, list(store.items())


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.integers(0, 10_000), st.integers(60, 400), st.sampled_from([1, 7, 100]), st.booleans())
def test_whole_stores_are_byte_identical(tmp_path_factory, monkeypatch, seed, n, batch, shuffled):
    bufs = list(Workload(seed, n, users=4, channels=3))
    if shuffled:  # arrival order: deletes before their targets, duplicates
        rng = random.Random(seed)
        rng.shuffle(bufs)
        bufs += rng.sample(bufs, min(10, len(bufs)))
    base = tmp_path_factory.mktemp("speedups")
    assert views.entries is native.entries and reindex_mod._native is native  # the compiled path is the one under test
    fast = _build(base / "compiled", bufs, batch)
    with pure_path(monkeypatch):
        slow = _build(base / "pure", bufs, batch)
    assert fast[0] == slow[0]  # after ingest
    assert fast[1] == slow[1]  # after a reindex
    assert fast[0] == fast[1]


def test_pure_switch_in_a_fresh_process():
    env = dict(os.environ, CABLESTORE_PURE="1")
    code = "import cablestore.compiled as c, cablestore.wire.codec as k; print(c.COMPILED, k._decode is k.decode_post_py)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True).stdout.split()
    assert out == ["False", "True"]
    version = subprocess.run([sys.executable, "-m", "cablestore", "--version"], env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    assert "pure Python" in version
    version = subprocess.run([sys.executable, "-m", "cablestore", "--version"], capture_output=True, text=True, timeout=60, check=True).stdout
    assert "compiled" in version


def test_ingest_batches_pipelines_verification_and_stores_what_ingest_many_does(tmp_path):
    bufs = list(Workload(5, 1200, users=4, channels=3))
    forged = bytearray(bufs[700])
    forged[40] ^= 1  # a signature byte: refused in its own batch, the rest stored
    bufs[700] = bytes(forged)
    batches = [bufs[i : i + 300] for i in range(0, len(bufs), 300)]
    with Store(tmp_path / "many", now=lambda: NOW) as store:
        expected = [[(r.index, r.ok) for r in store.ingest_many(b)] for b in batches]
        many = list(store.items())
    with Store(tmp_path / "piped", verify_workers=2, now=lambda: NOW) as store:
        got = [[(r.index, r.ok) for r in results] for results in store.ingest_batches(iter(batches))]
        piped = list(store.items())
    assert got == expected and (100, False) in got[2]
    assert piped == many


@FAST
@given(st.lists(posts(), min_size=1, max_size=6), st.data())
def test_batch_verifier_gives_pynacls_verdict(bufs, data):
    """The GIL-free batch check (cablestore._signatures) and pynacl's crypto_sign_open agree, post by post."""
    from cablestore.wire import crypto

    assert crypto.THREADED
    odd = []
    for buf in bufs:
        i = data.draw(st.integers(0, len(buf) - 1))
        flipped = bytearray(buf)
        flipped[i] ^= 1 << data.draw(st.integers(0, 7))  # a key, signature or body bit
        odd += [bytes(flipped), buf[: data.draw(st.integers(0, 97))], buf[:32] + bytes(64) + buf[96:], buf + b"\x00"]
    batch = bufs + odd
    expected = [crypto.verify_post(b) for b in batch]
    assert crypto._verify_chunk(batch) == expected
    assert crypto._verify_chunk([bytearray(b) for b in batch]) == expected  # any bytes-like
    assert all(expected[: len(bufs)]) and not all(expected)
    pool = crypto.verify_pool(2)
    try:  # threads sharing the batches, this thread helping: the same verdicts, in order
        assert isinstance(pool, crypto.VerifyThreads) and pool.workers == 2
        first, second = crypto.verify_many(batch * 40, pool), crypto.verify_many(batch * 3, pool)
        assert list(second) == expected * 3 and list(first) == expected * 40
        assert 1 <= pool.running <= 2
        abandoned = crypto.verify_many(batch * 40, pool)
        next(abandoned)
        del abandoned  # leaves the queue; its threads finish the posts they claimed
        assert list(crypto.verify_many(batch, pool)) == expected
    finally:
        pool.shutdown()
    assert pool.running == 0
    assert list(crypto.verify_many(batch, pool)) == expected  # a shut-down pool: checked by the caller


def test_an_unread_batch_in_a_cycle_left_to_exit_does_not_hang_the_interpreter():
    """Regression: with C threads of its own, a batch freed by the collector at exit waited for a thread already gone."""
    code = (
        "from cablestore.authoring.workload import generate\n"
        "from cablestore.wire import crypto\n"
        "pool = crypto.verify_pool(1)\n"
        "holder = [crypto.verify_many(generate(seed=1, posts=300), pool)]\n"
        "holder.append(holder)  # the batch is reachable only from a cycle the collector frees at exit\n"
        "del pool\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr


def _empty_filter(bits: int):
    from cablestore.store.write.hashfilter import HashFilter

    f = object.__new__(HashFilter)  # the bits alone, without a DB to build from
    f._bits, f._mask, f._count, f._capacity = bytearray(bits >> 3), bits - 1, 0, bits // 16
    return f


# Mostly hashes; sometimes the shorter or longer slice a damaged key gives.
filter_keys = st.one_of(hashes, hashes, hashes, st.binary(max_size=40))


@FAST
@given(st.lists(filter_keys, min_size=1, max_size=300), st.lists(filter_keys, max_size=50), st.sampled_from([1 << 16, 1 << 20, 1 << 25]))
def test_hash_filter_bits_and_answers_match_pure(added, asked, bits):
    """The compiled probes set the bits the pure ones set, and answer every question the same, short slices included."""
    fast, slow = _empty_filter(bits), _empty_filter(bits)
    for h in added:
        fast.add(h)
    try:
        hashfilter_mod._native = None  # the pure original, as CABLESTORE_PURE=1 selects it
        for h in added:
            slow.add(h)
        pure_answers = [slow.might_have(h) for h in added + asked]
    finally:
        hashfilter_mod._native = native
    assert fast._bits == slow._bits and fast._count == slow._count == len(added)
    assert [fast.might_have(h) for h in added + asked] == pure_answers
    assert all(pure_answers[: len(added)])


def test_hash_filter_probes_refuse_a_mask_past_their_bits():
    """A mask reaching past the bit array is refused, not a write or read out of bounds."""
    for probe in (native.filter_set, native.filter_test):
        with pytest.raises(ValueError):
            probe(bytearray(2), 0xFFFFFFFF, b"\xff" * 32, 4)
        with pytest.raises(ValueError):
            probe(bytearray(0), 0, b"\xff" * 32, 4)
        with pytest.raises(TypeError):
            probe(None, 15, b"\xff" * 32, 4)


@pytest.mark.parametrize("damaged", [b"!deleted!" + b"\x01" * 8, b"!rev!" + b"\x02" * 10], ids=["tombstone", "reverse"])
def test_a_damaged_short_key_does_not_stop_ingest_on_either_path(tmp_path, monkeypatch, damaged):
    """Regression: a key too short to name a hash made the compiled filter raise ValueError on every write."""
    monkeypatch.setattr(hashfilter_mod, "LINK_FILTER_AFTER", 0)  # the link filter is built at the first question
    bufs = list(Workload(11, 60, users=3, channels=2))
    results = {}
    for name in ("compiled", "pure"):
        with monkeypatch.context() as m:
            if name == "pure":
                m.setattr(hashfilter_mod, "_native", None)
            with Store(tmp_path / name, now=lambda: NOW) as store:
                store.ingest_many(bufs[:30])
                store.db.put(damaged, b"junk")
                store.writer.forget_caches()  # the filters are built again, from a scan that meets the damaged key
                stored = store.ingest_many(bufs[30:])
                results[name] = ([r.error for r in stored], list(store.items()))
    assert results["compiled"] == results["pure"]
    assert all(error is None for error in results["compiled"][0])


def test_every_compiled_function_is_required_of_the_extension():
    """compiled.SPEEDUPS names each function the sources define: an extension built before one was added is refused."""
    import re
    from pathlib import Path

    src = Path(compiled.__file__).parent.parent
    defined = set()
    for name in ("_speedups.pyx", "_decoding.pxi", "_sums.pxi", "_bulk.pxi"):
        defined |= set(re.findall(r"^def (\w+)\(", (src / name).read_text(), re.M))
    assert defined == compiled.SPEEDUPS
    assert set(re.findall(r"^cdef class (\w+)", (src / "_signatures.pyx").read_text(), re.M)) == compiled.SIGNATURES


def test_the_compiled_twin_takes_its_key_prefixes_from_the_keyspace():
    """No key prefix is spelled in the extension's sources; the ones it was bound to are the keyspace's."""
    import re
    from pathlib import Path

    from cablestore.compiled.sources import SOURCES
    from cablestore.keyspace import keys

    src = Path(compiled.__file__).parent.parent
    for name in SOURCES["_speedups"]:
        assert re.findall(r'b"![a-z_]+!', (src / name).read_text()) == [], name
    if native is not None:
        expected = {"chat": keys.CHAT, "state": keys.STATE, "author": keys.AUTHOR, "user": keys.USER, "channel": keys.CHANNEL}
        assert native.bound_prefixes() == {**expected, "heads": keys.LINKS + b"h", "reverse": keys.REVERSE}


def test_an_extension_older_than_the_sources_falls_back_to_pure_python():
    module, path = compiled._load("_speedups", compiled.SPEEDUPS | {"a_function_added_since"})
    assert module is None and path.startswith("pure Python") and "rebuild" in path
    module, path = compiled._load("_speedups")
    assert module is native and path == "compiled (Cython)"


def test_an_extension_built_from_other_sources_falls_back_to_pure_python(monkeypatch):
    """Regression: an extension with every function the package calls was used even when built from older sources."""
    monkeypatch.setattr(compiled, "digest", lambda name, folder: "0" * 64)  # the sources beside it changed since
    for name, required in (("_speedups", compiled.SPEEDUPS), ("_signatures", compiled.SIGNATURES)):
        module, path = compiled._load(name, required)
        assert module is None and "built from other sources" in path and "rebuild" in path


def test_each_extension_carries_the_digest_of_its_sources(tmp_path):
    import re
    from pathlib import Path

    from cablestore.compiled import sources as extension_sources

    src = Path(compiled.__file__).parent.parent
    assert native.SOURCE_DIGEST == extension_sources.digest("_speedups", src)
    assert compiled.signatures.SOURCE_DIGEST == extension_sources.digest("_signatures", src)
    for name, files in extension_sources.SOURCES.items():  # every section a .pyx includes is in its digest
        included = re.findall(r'^include "([^"]+)"', (src / f"{name}.pyx").read_text(), re.M)
        assert set(files) == {f"{name}.pyx", *included}
    # An install without the sources (a wheel) has nothing to compare with.
    assert extension_sources.digest("_speedups", tmp_path) is None


def test_hash_filters_leave_out_keys_too_short_to_name_a_hash(tmp_path):
    """Regression: a damaged key's short slice was counted (and, compiled, refused with ValueError)."""
    with Store(tmp_path / "s") as store:
        store.db.put(b"!deleted!" + b"\x01" * 8, b"junk")
        store.db.put(b"!deleted!" + b"\x02" * 32 + b"\x03" * 32, b"junk")
        built = hashfilter_mod.HashFilter(store.db, b"!deleted!")
    assert built._count == 1 and built.might_have(b"\x02" * 32)


def test_a_verify_thread_needs_no_gil_between_posts():
    """Regression: every libsodium call was followed by a check for a Python error, which took the GIL, so a
    verify thread waited for the indexing thread's GIL after each post.  Here the main thread holds the GIL
    (a switch interval of 100 s, a pure-Python loop) while the thread checks a whole batch."""
    import threading
    import time

    from cablestore.wire import crypto

    bufs = list(Workload(4, 300, users=3, channels=2))
    batch = crypto._batch(bufs)
    started = threading.Event()

    def verify():
        started.set()
        batch.work()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(100)
    worker = threading.Thread(target=verify)
    try:
        worker.start()
        started.wait()  # the worker has the GIL until work() releases it
        deadline = time.monotonic() + 20
        while batch.checked() < len(bufs) and time.monotonic() < deadline:
            pass  # Python bytecode: this thread keeps the GIL
        checked = batch.checked()
    finally:
        sys.setswitchinterval(interval)
        worker.join(timeout=60)
    assert checked == len(bufs)
    assert batch.verdicts_list() == [crypto.verify_post(b) for b in bufs]
