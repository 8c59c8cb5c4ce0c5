"""Where the time and the bytes go: profiles of reindex and ingest, and disk per key family.

    python -m benchmarks.profile reindex --posts 100000
    python -m benchmarks.profile ingest --posts 20000 --verify
    python -m benchmarks.profile disk --posts 100000
    python -m benchmarks.profile speedups --posts 100000
    python -m benchmarks.profile verify --posts 100000
    python -m benchmarks.profile reads --posts 1000000 --tail 50000
    python -m benchmarks.profile writes --posts 100000
    python -m benchmarks.profile info-deletes --posts 1000

``reindex`` builds a store by trusted ingest (reused if present under
``--out``), copies it and profiles ``cablestore reindex`` on the copy.
``ingest`` ingests the first half of the posts unprofiled (so the store
has history), then profiles the second half, in batches of 1,000.  Both
print the run's phase seconds and the functions with the most time of their
own (cProfile; ``--sort cumulative`` for totals).  ``disk`` compacts the
store and sums key and value bytes per key family, and the compacted bytes
each family takes in a LevelDB of its own (with the store's options).
``speedups`` times each compiled function against its pure original.
``verify`` times the GIL-free signature threads against one thread, and
trusted ingest alone against trusted ingest beside a busy verify thread.
``reads`` counts and times the point reads and seeks of the last ``--tail``
posts of a trusted ingest (:mod:`benchmarks.reads`).  ``writes`` counts
what each post's WriteBatch holds, by key family: puts, deletes, and
deletes of keys the DB did not hold (LevelDB writes a tombstone all the
same), over a trusted ingest of the posts in batches of 1,000.
``info-deletes`` times one ``ingest_many`` of ``--posts`` posts that
alternate a text and the delete of a post/info (each delete of a post/info
asks which channels its author is a member of, mid-batch), against a batch
of texts alone: the worst shape of batch known for the indexer.
Results are for comparing within one run: the machine is shared.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

NOW = 1_900_000_000_000


def _store(out: Path, n: int, seed: int) -> Path:
    from .rebuild import build_store

    return build_store(out, n, seed)


def _posts_file(out: Path, n: int, seed: int) -> Path:
    from cablestore.authoring.workload import Workload, write_posts

    path = out / f"posts-{n}-seed{seed}.bin"
    if not path.exists():
        write_posts(path, Workload(seed, n))
    return path


_CPU = False  # --cpu: time with the thread's CPU clock (a shared machine's load then matters far less)


def _profiler() -> cProfile.Profile:
    return cProfile.Profile(time.thread_time) if _CPU else cProfile.Profile()


def _top(profile: cProfile.Profile, sort: str, limit: int) -> None:
    pstats.Stats(profile, stream=sys.stdout).strip_dirs().sort_stats(sort).print_stats(limit)


def profile_reindex(out: Path, n: int, seed: int, sort: str, limit: int) -> None:
    from cablestore import Store
    from cablestore.rebuild.reindex import reindex

    src = _store(out, n, seed)
    work = out / "profile-reindex.ldb"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(src, work)
    with Store(work, now=lambda: NOW) as store:
        profile = _profiler()
        start = time.perf_counter()
        profile.enable()
        report = reindex(store)
        profile.disable()
        seconds = time.perf_counter() - start
    shutil.rmtree(work, ignore_errors=True)
    phases = ", ".join(f"{k} {v:.2f} s" for k, v in report.seconds.items())
    print(f"reindex of {report.posts:,} posts: {seconds:.2f} s under the profiler ({phases})")
    _top(profile, sort, limit)


def profile_ingest(out: Path, n: int, seed: int, verify: bool, sort: str, limit: int) -> None:
    from cablestore import Store
    from cablestore.authoring.workload import iter_posts

    work = out / "profile-ingest.ldb"
    shutil.rmtree(work, ignore_errors=True)
    chunks = list(iter_posts(_posts_file(out, n, seed), 1000))
    half = len(chunks) // 2
    with Store(work, verify_signatures=verify, now=lambda: NOW) as store:
        for chunk in chunks[:half]:
            store.ingest_many(chunk)
        profile = _profiler()
        start = time.perf_counter()
        profile.enable()
        for chunk in chunks[half:]:
            store.ingest_many(chunk)
        profile.disable()
        seconds = time.perf_counter() - start
    shutil.rmtree(work, ignore_errors=True)
    posts = sum(len(c) for c in chunks[half:])
    kind = "verified" if verify else "trusted"
    print(f"{kind} ingest of posts {n - posts:,} to {n:,}: {seconds:.2f} s under the profiler")
    _top(profile, sort, limit)


def _family(key: bytes) -> str:
    name = key[: key.find(b"!", 1) + 1].decode("ascii", "replace")
    if name == "!rev!":
        return "!rev!<target>l<hash>"
    return name


def disk_families(out: Path, n: int, seed: int) -> None:
    import plyvel

    from cablestore import Store
    from cablestore.store.lifecycle import opening

    src = _store(out, n, seed)
    with Store(src, now=lambda: NOW) as store:
        store.db.compact_range()
    on_disk = sum(f.stat().st_size for f in src.iterdir() if f.is_file())
    fams: dict = defaultdict(list)
    db = plyvel.DB(str(src))
    try:
        for key, value in db.iterator():
            fams[_family(key)].append((key, value))
    finally:
        db.close()
    posts = len(fams["!post!"])
    raw = sum(len(v) for _, v in fams["!post!"])
    print(f"{posts:,} posts, {raw / posts:.0f} B raw each; compacted store {on_disk / posts:.0f} B/post = {on_disk / raw:.2f}x raw")
    print("| key family | keys | key+value B/post | alone, compacted B/post | × raw |\n|---|---|---|---|---|")
    rows = []
    for name, pairs in fams.items():
        alone = out / "profile-family.ldb"
        shutil.rmtree(alone, ignore_errors=True)
        fam_db = plyvel.DB(str(alone), create_if_missing=True, bloom_filter_bits=10, block_size=opening.BLOCK_SIZE)
        with fam_db.write_batch() as wb:
            for key, value in pairs:
                wb.put(key, value)
        fam_db.compact_range()
        fam_db.close()
        size = sum(os.path.getsize(alone / f) for f in os.listdir(alone) if f.endswith(".ldb"))
        shutil.rmtree(alone, ignore_errors=True)
        logical = sum(len(k) + len(v) for k, v in pairs)
        rows.append((size, f"| `{name}` | {len(pairs):,} | {logical / posts:.0f} | {size / posts:.0f} | {size / raw:.2f} |"))
    for _, row in sorted(rows, reverse=True):
        print(row)


def _write_family(key: bytes) -> str:
    """:func:`_family`, with the sub-index byte of the families that have several (KEYSPACE.md)."""
    name = _family(key)
    if name in ("!channel!", "!state!"):
        end = key.find(b"\x00\x01", len(name))  # the channel's terminator (a NUL in a name is escaped)
        if 0 <= end and end + 2 < len(key):
            return f"{name}<ch>{chr(key[end + 2])}"
    if name == "!user!" and len(key) > len(name) + 32:
        return f"!user!<pubkey>{chr(key[len(name) + 32])}"
    if name == "!links!" and len(key) > len(name):
        return name + chr(key[len(name)])
    return name


def count_writes(out: Path, n: int, seed: int) -> None:
    """Puts and deletes a post, by key family, as the WriteBatches hold them."""
    from cablestore import Store
    from cablestore.authoring.workload import iter_posts
    from cablestore.store.write import txn as txn_mod

    puts: Counter = Counter()
    deletes: Counter = Counter()
    absent: Counter = Counter()
    txn_init = txn_mod.Txn.__init__

    class CountedBatch:
        """A WriteBatch whose puts and deletes are counted as they go in (before LevelDB writes any)."""

        def __init__(self, db, batch):
            self._db, self._batch = db, batch

        def __enter__(self):
            self._batch.__enter__()
            return self

        def __exit__(self, *exc):
            return self._batch.__exit__(*exc)

        def put(self, key, value):
            puts[_write_family(key)] += 1
            self._batch.put(key, value)

        def delete(self, key):
            deletes[_write_family(key)] += 1
            absent[_write_family(key)] += self._db.get(key) is None
            self._batch.delete(key)

    class CountedDB:
        def __init__(self, db):
            self._db = db

        def write_batch(self, *args, **kw):
            return CountedBatch(self._db, self._db.write_batch(*args, **kw))

        def __getattr__(self, name):
            return getattr(self._db, name)

    def counted_init(self, db, *args, **kw):
        txn_init(self, CountedDB(db), *args, **kw)

    work = out / "profile-writes.ldb"
    shutil.rmtree(work, ignore_errors=True)
    posts = 0
    txn_mod.Txn.__init__ = counted_init
    try:
        with Store(work, verify_signatures=False, now=lambda: NOW) as store:
            for chunk in iter_posts(_posts_file(out, n, seed), 1000):
                store.ingest_many(chunk)
                posts += len(chunk)
    finally:
        txn_mod.Txn.__init__ = txn_init
        shutil.rmtree(work, ignore_errors=True)
    total = sum(puts.values()) + sum(deletes.values())
    print(f"{posts:,} posts: {total / posts:.2f} writes a post ({sum(puts.values()) / posts:.2f} puts, {sum(deletes.values()) / posts:.2f} deletes)")
    print("| key family | puts a post | deletes a post | of which of absent keys |\n|---|---|---|---|")
    for family in sorted(set(puts) | set(deletes), key=lambda f: -(puts[f] + deletes[f])):
        print(f"| `{family}` | {puts[family] / posts:.3f} | {deletes[family] / posts:.3f} | {absent[family] / posts:.3f} |")


def info_deletes(out: Path, n: int) -> None:
    """CPU a post of one batch alternating texts and deletes of post/infos, against a batch of texts."""
    import hashlib

    from cablestore import DELETE, INFO, TEXT, Keypair, Store, make_post, post_hash

    authors = [Keypair.from_seed(hashlib.sha256(b"info-deletes %d" % i).digest()) for i in range(n // 2)]
    infos = [make_post(a, INFO, NOW - 30_000 + i, info=[("name", "x")])[0] for i, a in enumerate(authors)]
    texts, mixed = [], []
    for i, a in enumerate(authors):
        text = make_post(a, TEXT, NOW - 20_000 + i, channel=f"c{i % 50}", text="hi")[0]
        texts += [text, make_post(a, TEXT, NOW - 10_000 + i, channel=f"c{i % 50}", text="again")[0]]
        mixed += [text, make_post(a, DELETE, NOW - 10_000 + i, hashes=[post_hash(infos[i])])[0]]
    cpu = {}
    for name, batch in (("texts", texts), ("texts and info deletes", mixed)):
        work = out / "profile-info-deletes.ldb"
        shutil.rmtree(work, ignore_errors=True)
        with Store(work, verify_signatures=False, now=lambda: NOW) as store:
            store.ingest_many(infos)
            start = time.process_time()
            results = store.ingest_many(batch)
            cpu[name] = (time.process_time() - start) / len(batch)
            assert all(r.ok for r in results)
        shutil.rmtree(work, ignore_errors=True)
        print(f"one batch of {len(batch):,} posts, {name}: {cpu[name] * 1e6:.1f} µs a post (CPU)")
    print(f"ratio: {cpu['texts and info deletes'] / cpu['texts']:.1f}x")


def compare_speedups(out: Path, n: int, seed: int, count: int = 30_000) -> None:
    """CPU per post of each compiled function against its pure original (best of 5)."""
    import cablestore.views as views
    from cablestore import compiled
    from cablestore.authoring.workload import read_posts
    from cablestore.keyspace import records
    from cablestore.keyspace.records import Indexed
    from cablestore.rebuild.fold import Fold
    from cablestore.wire import codec
    from cablestore.wire.codec import post_hash

    native = compiled.native
    if native is None:
        print(f"no compiled hot path here: {compiled.HOT_PATH}")
        return
    bufs = read_posts(_posts_file(out, n, seed))[:count]
    hashes = [post_hash(b) for b in bufs]
    posts = [codec.decode_post_py(b) for b in bufs]

    def cpu(fn) -> float:
        best = float("inf")
        for _ in range(5):
            start = time.thread_time()
            fn()
            best = min(best, time.thread_time() - start)
        return best / len(bufs) * 1e6

    def pure_indexed():
        saved, records._new_indexed = records._new_indexed, None
        try:
            return [Indexed.of(b, p, h) for b, p, h in zip(bufs, posts, hashes, strict=True)]
        finally:
            records._new_indexed = saved

    ips = pure_indexed()
    pairs = [e for ip in ips for e in views.entries_py(ip)]
    rows = [
        ("decode_post", lambda: [codec.decode_post_py(b) for b in bufs], lambda: [native.decode_post(b) for b in bufs]),
        ("Indexed.of", pure_indexed, lambda: [native.new_indexed(h, p, ()) for p, h in zip(posts, hashes, strict=True)]),
        ("view entries", lambda: [views.entries_py(ip) for ip in ips], lambda: [native.entries(ip) for ip in ips]),
        ("view groups", lambda: [views.groups_py(ip) for ip in ips], lambda: [native.groups(ip) for ip in ips]),
        ("digest fold of the entries", lambda: Fold(64).add_entries_py(pairs), lambda: Fold(64).add_entries(pairs)),
    ]
    print(f"| per post (CPU, best of 5, {len(bufs):,} posts) | pure Python | compiled | speed-up |\n|---|---|---|---|")
    total_pure = total_fast = 0.0
    for name, pure, fast in rows:
        a, b = cpu(pure), cpu(fast)
        total_pure, total_fast = total_pure + a, total_fast + b
        print(f"| {name} | {a:.2f} µs | {b:.2f} µs | {a / b:.1f}x |")
    print(f"| all of the above | {total_pure:.2f} µs | {total_fast:.2f} µs | {total_pure / total_fast:.1f}x |")


def verify_threads(out: Path, n: int, seed: int, count: int = 40_000) -> None:
    """The GIL-free signature threads: their scaling, and what a busy one costs the indexing thread beside it."""
    from cablestore import Store
    from cablestore.authoring.workload import read_posts
    from cablestore.wire import crypto

    if not crypto.THREADED:
        print("the compiled signature checker is not built (pure Python): nothing to measure")
        return
    bufs = read_posts(_posts_file(out, n, seed))[:count]

    def rate(fn) -> float:
        start = time.perf_counter()
        fn()
        return len(bufs) / (time.perf_counter() - start)

    one = rate(lambda: crypto._verify_chunk(bufs))
    print(f"{len(bufs):,} posts; one thread (this one): {one:,.0f} /s")
    for workers in (1, 2):
        pool = crypto.verify_pool(workers)
        try:
            r = rate(lambda pool=pool: list(crypto.verify_many(bufs, pool)))
        finally:
            pool.shutdown()
        print(f"{workers} verify thread(s) + this one: {r:,.0f} /s ({r / one:.2f}x)")

    def trusted(label: str) -> None:
        path = out / "verify-threads.ldb"
        shutil.rmtree(path, ignore_errors=True)
        with Store(path, verify_signatures=False, now=lambda: NOW) as store:
            start, cpu = time.perf_counter(), time.thread_time()
            for i in range(0, len(bufs), 1000):
                store.ingest_many(bufs[i : i + 1000])
            wall, cpu = time.perf_counter() - start, time.thread_time() - cpu
        shutil.rmtree(path, ignore_errors=True)
        print(f"trusted ingest {label}: {len(bufs) / wall:,.0f} /s, indexing thread {cpu * 1e6 / len(bufs):.1f} µs of CPU a post")

    trusted("alone")
    pool = crypto.verify_pool(1)
    try:
        busy = crypto.verify_many(bufs * 4, pool)  # keeps one core verifying meanwhile
        trusted("beside a busy verify thread")
        del busy
    finally:
        pool.shutdown()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("reindex", "ingest", "disk", "speedups", "verify", "reads", "writes", "info-deletes"))
    parser.add_argument("--posts", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="bench-results", help="directory for posts and stores (reused)")
    parser.add_argument("--verify", action="store_true", help="ingest: check signatures")
    parser.add_argument("--sort", default="tottime", help="pstats sort key (tottime, cumulative, ...)")
    parser.add_argument("--limit", type=int, default=25, help="functions to list")
    parser.add_argument("--cpu", action="store_true", help="profile CPU time of the thread instead of wall time")
    parser.add_argument("--tail", type=int, default=50_000, help="reads: the last posts whose reads are timed")
    args = parser.parse_args(argv)
    global _CPU
    _CPU = args.cpu
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.what == "reindex":
        profile_reindex(out, args.posts, args.seed, args.sort, args.limit)
    elif args.what == "ingest":
        profile_ingest(out, args.posts, args.seed, args.verify, args.sort, args.limit)
    elif args.what == "speedups":
        compare_speedups(out, args.posts, args.seed)
    elif args.what == "verify":
        verify_threads(out, args.posts, args.seed)
    elif args.what == "info-deletes":
        info_deletes(out, args.posts)
    elif args.what == "writes":
        count_writes(out, args.posts, args.seed)
    elif args.what == "reads":
        from .reads import profile_reads

        if not 1000 <= args.tail <= args.posts:
            parser.error("reads: --tail must be at least one batch (1000) and at most --posts")
        profile_reads(_posts_file(out, args.posts, args.seed), out, args.tail)
    else:
        disk_families(out, args.posts, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
