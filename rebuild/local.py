"""The in-process engine: the same recomputation as the Spark job, without Spark."""

from __future__ import annotations

from collections import defaultdict

from .recompute import (
    Fault,
    bucket,
    bucket_digest,
    classify,
    newer,
    recompute_post,
    render,
    tombstone_status,
    unpack_tombstone,
    view_of,
)
from .result import EngineResult


def recompute(primary_records, check_signatures: bool = True, progress=None):
    """Return ``(entries, faults, post count, tombstone count)`` from primary records."""
    posts, tombs, faults = {}, [], []
    for rec in primary_records:
        if rec[0] == "p":
            posts[rec[1]] = rec[2]
        else:
            tomb = unpack_tombstone(rec[1], rec[2], rec[3])
            (faults if isinstance(tomb, Fault) else tombs).append(tomb)
    n_tombs = len(tombs) + len(faults)
    on_target, made_by = defaultdict(list), defaultdict(list)
    for tomb in tombs:
        status = tombstone_status(tomb, posts.get(tomb.by))
        if isinstance(status, Fault):
            faults.append(status)
            continue
        on_target[tomb.target].append((tomb, status))
        made_by[tomb.by].append(tomb)
    entries, best = {}, {}
    for h, blob in posts.items():
        post_faults, post = classify(h, blob, on_target.get(h, ()), check_signatures)
        if progress:
            progress.advance()
        faults.extend(post_faults)
        if post is None:
            continue
        post_entries, candidates = recompute_post(h, blob, post, made_by.get(h, ()))
        entries.update(post_entries)
        for group, cand in candidates:
            best[group] = newer(best[group], cand) if group in best else cand
    for (view_name, group), cand in best.items():
        entries.update(render(view_name, group, cand))
    return entries, faults, len(posts), n_tombs


def _buckets(pairs, partitions):
    out = defaultdict(list)
    for key, value in pairs:
        out[(view_of(key), bucket(key, partitions))].append((key, value))
    return out


def run(source, partitions: int = 16, check_signatures: bool = True, progress=None) -> EngineResult:
    entries, faults, n_posts, n_tombs = recompute(source.primary(), check_signatures, progress)
    recomputed = _buckets(entries.items(), partitions)
    live = _buckets(source.live(), partitions)

    def fetch(wanted):
        rec = {k: v for b in wanted for k, v in recomputed.get(b, ())}
        liv = {k: v for b in wanted for k, v in live.get(b, ())}
        return rec, liv

    return EngineResult(
        engine="local",
        partitions=partitions,
        posts=n_posts,
        tombstones=n_tombs,
        faults=faults,
        recomputed_digests={b: bucket_digest(e) for b, e in recomputed.items()},
        live_digests={b: bucket_digest(e) for b, e in live.items()},
        recomputed_counts=_count(recomputed),
        live_counts=_count(live),
        fetch=fetch,
    )


def _count(buckets):
    counts = defaultdict(int)
    for (view_name, _), items in buckets.items():
        counts[view_name] += len(items)
    return dict(counts)
