"""Which reads an ingest makes, and what each costs, as the store grows.

    python -m benchmarks.profile reads --posts 1000000 --tail 50000

Trusted ingest of ``--posts`` posts in batches of 1,000; over the last
``--tail`` of them every point read of the write transactions and every
reverse seek (``Txn.last_candidate``) is counted and timed by key family,
and the seeks into ``!rev!`` (the links view) by what they found: another
post still linking, or none.  The wrappers cost time of their own: compare
the figures with each other, not with an unwrapped ingest.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from pathlib import Path

NOW = 1_900_000_000_000


def _family(key: bytes) -> str:
    return key[: key.find(b"!", 1) + 1].decode("ascii", "replace")


class _TimedReads:
    """A DB as a transaction reads it, each ``get`` counted and timed by key family."""

    def __init__(self, db, counts: Counter, nanos: Counter):
        self._db, self._counts, self._nanos = db, counts, nanos

    def get(self, key, *args, **kw):
        name = "get " + _family(key)
        start = time.perf_counter_ns()
        try:
            return self._db.get(key, *args, **kw)
        finally:
            self._nanos[name] += time.perf_counter_ns() - start
            self._counts[name] += 1

    def __getattr__(self, name):
        return getattr(self._db, name)


def profile_reads(posts_file: Path, out: Path, tail: int) -> None:
    from cablestore import Store
    from cablestore.authoring.workload import iter_posts
    from cablestore.store.write import txn as txn_mod

    work = out / "profile-reads.ldb"
    shutil.rmtree(work, ignore_errors=True)
    chunks = list(iter_posts(posts_file, 1000))
    cut = max(0, len(chunks) - tail // 1000)
    counts: Counter = Counter()
    nanos: Counter = Counter()
    txn_init, last_candidate = txn_mod.Txn.__init__, txn_mod.Txn.last_candidate

    def timed_init(self, db, *args, **kw):
        txn_init(self, _TimedReads(db, counts, nanos), *args, **kw)

    def timed_seek(self, prefix, *rest):
        name = "seek " + _family(prefix)
        start = time.perf_counter_ns()
        found = last_candidate(self, prefix, *rest)
        nanos[name] += time.perf_counter_ns() - start
        counts[name] += 1
        if prefix.startswith(b"!rev!"):
            counts["seek !rev! found " + ("none" if found is None or len(found) == len(prefix) else "another linker")] += 1
        return found

    with Store(work, verify_signatures=False, now=lambda: NOW) as store:
        for chunk in chunks[:cut]:
            store.ingest_many(chunk)
        measured = sum(len(c) for c in chunks[cut:])
        txn_mod.Txn.__init__, txn_mod.Txn.last_candidate = timed_init, timed_seek
        try:
            start = time.perf_counter()
            for chunk in chunks[cut:]:
                store.ingest_many(chunk)
            seconds = time.perf_counter() - start
        finally:
            txn_mod.Txn.__init__, txn_mod.Txn.last_candidate = txn_init, last_candidate
    shutil.rmtree(work, ignore_errors=True)
    print(f"posts {sum(len(c) for c in chunks[:cut]):,} to {sum(len(c) for c in chunks):,}: {seconds / max(measured, 1) * 1e6:.1f} µs a post (wrapped)")
    total = 0.0
    for name in sorted(counts):
        line = f"{name:32s} {counts[name] / max(measured, 1):.3f} a post"
        if name in nanos:
            each, per_post = nanos[name] / counts[name] / 1000, nanos[name] / max(measured, 1) / 1000
            total += per_post
            line += f", {each:.1f} µs each, {per_post:.2f} µs a post"
        print(line)
    print(f"{'reads in all':32s} {total:.1f} µs a post")
