"""The in-process engine: the same recomputation as the Spark job, without Spark.

It streams the posts once, folding each post's entries into bucket digests
(``rebuild/fold.py``), so memory holds the tombstones and the latest-group
candidates, never the store's entries.  Only when digests differ does a
second pass collect the entries of the differing buckets.
"""

from __future__ import annotations

import os

from cablestore.wire.crypto import verify_pool

from .fold import Fold, check_tombstones, fold_posts, parse_tombstones
from .recompute import enforcement_rows
from .result import EngineResult


def one_pass(source, parts: int, check_signatures: bool, wanted=None, skip=frozenset(), progress=None, pool=None, local_user=None) -> tuple[Fold, Fold]:
    """``(recomputed, live)`` folds of a source (a StoreSource or SnapshotSource)."""
    rec = Fold(parts, wanted, search=source.search())
    tombs = parse_tombstones(source.tombstones(), rec)
    makers = {t.by for t in tombs}
    by_blobs = {h: blob for h, blob in source.posts() if h in makers} if makers else {}
    on_target, made_by = check_tombstones(tombs, by_blobs, rec)
    facts, seed = (source.facts(), source.seed()) if local_user is not None else ((), None)
    if local_user is not None:  # a first, light pass: the moderation posts, to know what the state keeps out
        rec.rows = enforcement_rows(local_user, source.posts(), on_target, check_signatures, facts, seed)
    fold_posts(rec, source.posts(), on_target, made_by, check_signatures, skip, progress, pool)
    rec.add_latest(rec.best)
    rec.add_sums()
    rec.add_resolved(local_user, facts, seed)
    live = Fold(parts, wanted)
    live.add_entries(source.live())
    return rec, live


def known_faults(faults) -> frozenset:
    """Posts a first pass found faulty: a second pass leaves them out without checking signatures again."""
    return frozenset(f.hash for f in faults if f.kind != "bad_tombstone")


def result_of(engine: str, parts: int, rec: Fold, live: Fold) -> EngineResult:
    return EngineResult(
        engine=engine,
        partitions=parts,
        posts=rec.posts,
        tombstones=rec.tombstones,
        faults=rec.faults,
        recomputed_digests=rec.hex_digests(),
        live_digests=live.hex_digests(),
        recomputed_counts=rec.counts(),
        live_counts=live.counts(),
        fetch=None,
    )


def default_verify_workers() -> int:
    """One signature process when there is a second core: verifying and recomputing cost about the same."""
    return 1 if (os.cpu_count() or 1) > 1 else 0


def run(source, partitions: int = 16, check_signatures: bool = True, progress=None, verify_workers: int | None = None, local_user=None) -> EngineResult:
    workers = default_verify_workers() if verify_workers is None else verify_workers
    # The pool starts its processes at the first batch big enough to use it.
    pool = verify_pool(workers) if check_signatures and workers > 0 else None
    try:
        rec, live = one_pass(source, partitions, check_signatures, progress=progress, pool=pool, local_user=local_user)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    result = result_of("local", partitions, rec, live)
    differing = frozenset(result.differing_buckets())
    found = ({}, {})
    if differing:
        rec2, live2 = one_pass(source, partitions, False, differing, known_faults(rec.faults), local_user=local_user)
        found = (rec2.entries, live2.entries)
    result.fetch = lambda wanted: found
    return result
