"""The recomputation folded into bucket digests as it goes: what both engines run per partition.

A :class:`Fold` takes posts (with the tombstones on them and the tombstones
they made) or derived entries, and keeps only small things: per (view,
bucket) the sum of entry digests and a count, the faults, the best candidate
of every "latest" group, and, when asked for a set of buckets, the entries in
those buckets.  Folds of different partitions add up (:meth:`Fold.merge`), so
the Spark engine digests map-side and shuffles no entry, and the in-process
engine streams a store without holding its entries.
"""

from __future__ import annotations

import zlib
from itertools import islice

import blake3

from cablestore.compiled import native as _native
from cablestore.keyspace.records import Indexed
from cablestore.moderation import RELEVANT_TYPES
from cablestore.views import recon as recon_view
from cablestore.views import search as search_view
from cablestore.wire.codec import TEXT, TOPIC
from cablestore.wire.crypto import verify_many

from .recompute import (
    _VIEW_BY_PREFIX,
    DIGEST_MASK,
    Fault,
    classify,
    kept_out,
    newer,
    recompute_post,
    render,
    resolved_entries,
    tombstone_status,
    unpack_tombstone,
)

SEARCHED = (TEXT, TOPIC)  # the post types the search view indexes


class Fold:
    """Digests, counts, faults and latest-group candidates of part of the data."""

    __slots__ = ("parts", "wanted", "digests", "entries", "faults", "best", "posts", "tombstones", "moderation", "rows", "search", "sums")

    def __init__(self, parts: int, wanted: frozenset | None = None, search: bool = False):
        self.parts = parts
        self.search = search  # the store keeps the search view: its entries are recomputed too (views/search.py)
        self.wanted = wanted  # (view, bucket) pairs whose entries to keep, or None
        self.digests: dict = {}  # (view, bucket) -> [sum mod 2**256, count]
        self.entries: dict = {}  # key -> value, for wanted buckets only
        self.faults: list = []
        self.best: dict = {}  # (view name, group) -> candidate
        self.posts = 0
        self.tombstones = 0
        # (hash, blob) of the posts the moderation state is resolved from: few, so carried whole.
        self.moderation: list = []
        # The resolved rows that keep posts out (recompute.enforcement_rows), or None: set before folding.
        self.rows: dict | None = None
        # The finest !recon buckets' accumulators (sum, count) of the posts folded (views/recon.py), rendered once merged (add_sums).
        self.sums: dict = {}

    def add_entries(self, pairs) -> None:
        # The hot loop of both engines: entry_digest, view_of and bucket
        # inlined (tests/test_rebuild.py keeps them equal), sums reduced
        # mod 2**256 only when read.
        if _native is not None:  # the compiled loop (cablestore.compiled): the same sums and buckets
            _native.fold_entries(self.digests, self.wanted, self.entries, self.parts, _VIEW_BY_PREFIX, pairs, blake3.blake3, zlib.crc32)
            return
        self.add_entries_py(pairs)

    def add_entries_py(self, pairs) -> None:
        """:meth:`add_entries` in pure Python."""
        digests, wanted, parts = self.digests, self.wanted, self.parts
        views, crc32, blake, from_bytes = _VIEW_BY_PREFIX, zlib.crc32, blake3.blake3, int.from_bytes
        for key, value in pairs:
            b = (views.get(key[: key.find(b"!", 1) + 1], "unknown"), crc32(key) % parts)
            digest = from_bytes(blake(b"%d:%b%b" % (len(key), key, value)).digest(), "big")
            d = digests.get(b)
            if d is None:
                digests[b] = [digest, 1]
            else:
                d[0] += digest
                d[1] += 1
            if wanted is not None and b in wanted:
                self.entries[key] = value

    def add_post(self, h: bytes, blob: bytes, on_target, made, check_signatures: bool, signed: bool | None = None) -> None:
        """Classify one stored post; fold its entries in, or record its fault."""
        self.posts += 1
        faults, post = classify(h, blob, on_target, check_signatures, signed)
        if post is not None and self.rows is not None and (fault := kept_out(h, post, self.rows)) is not None:
            faults, post = faults + [fault], None
        self.faults.extend(faults)
        if post is None:
            return
        entries, candidates = recompute_post(h, blob, post, made)
        if self.search and post.post_type in SEARCHED:
            entries += search_view.entries(Indexed.of(blob, post, h))
        self.add_entries(entries)
        recon_view.add(self.sums, post.post_type, entries)
        if post.post_type in RELEVANT_TYPES:
            self.moderation.append((h, blob))
        best = self.best
        for group, cand in candidates:
            old = best.get(group)
            best[group] = cand if old is None else newer(old, cand)

    def add_latest(self, best: dict) -> None:
        """Fold in the entries of every group's winning post."""
        for (view_name, group), cand in best.items():
            self.add_entries(render(view_name, group, cand))

    def add_sums(self) -> None:
        """Fold in the range sums' rows (``views/recon.py``), once every partition's sums are merged in."""
        sums, self.sums = self.sums, {}
        self.add_entries(recon_view.rows(sums))

    def add_resolved(self, local_user: bytes | None, facts=(), seed=None) -> None:
        """Fold in the resolved moderation entries, from every partition's moderation posts (after merging) and the store's facts."""
        self.add_entries(resolved_entries(local_user, self.moderation, facts, seed))

    def merge(self, other: Fold) -> Fold:
        for b, (s, n) in other.digests.items():
            d = self.digests.get(b)
            if d is None:
                self.digests[b] = [s, n]
            else:
                d[0] += s
                d[1] += n
        self.entries.update(other.entries)
        recon_view.merge(self.sums, other.sums)
        self.faults.extend(other.faults)
        for group, cand in other.best.items():
            old = self.best.get(group)
            self.best[group] = cand if old is None else newer(old, cand)
        self.posts += other.posts
        self.tombstones += other.tombstones
        self.moderation += other.moderation
        return self

    def counts(self) -> dict:
        """Entries per view."""
        out: dict = {}
        for (view_name, _), (_, n) in self.digests.items():
            out[view_name] = out.get(view_name, 0) + n
        return out

    def hex_digests(self) -> dict:
        return {b: f"{s & DIGEST_MASK:064x}:{n}" for b, (s, n) in self.digests.items()}


def parse_tombstones(records, fold: Fold | None = None):
    """Tombstones from ``("t", target, by, value)`` records; damaged ones become faults in ``fold``."""
    out = []
    for rec in records:
        tomb = unpack_tombstone(rec[1], rec[2], rec[3])
        if isinstance(tomb, Fault):
            if fold is not None:
                fold.faults.append(tomb)
        else:
            out.append(tomb)
        if fold is not None:
            fold.tombstones += 1
    return out


def check_tombstones(tombs, by_blobs: dict, fold: Fold | None = None) -> tuple[dict, dict]:
    """Cross-check tombstones with their stored post/deletes (``by_blobs``: hash -> blob).

    Returns ``(on_target, made_by)``: target -> [(tombstone, status)] and
    delete hash -> [tombstone]; a contradicted tombstone becomes a fault in ``fold``.
    """
    on_target: dict = {}
    made_by: dict = {}
    for t in tombs:
        status = tombstone_status(t, by_blobs.get(t.by))
        if isinstance(status, Fault):
            if fold is not None:
                fold.faults.append(status)
            continue
        on_target.setdefault(t.target, []).append((t, status))
        made_by.setdefault(t.by, []).append(t)
    return on_target, made_by


def by_key(tombs, attr: str) -> dict:
    out: dict = {}
    for t in tombs:
        out.setdefault(getattr(t, attr), []).append(t)
    return out


def fold_posts(fold: Fold, posts, on_target: dict, made_by: dict, check_signatures: bool, skip=frozenset(), progress=None, pool=None) -> Fold:
    """Fold ``(hash, blob)`` posts in; hashes in ``skip`` (known faults) are left out.

    ``pool``: a :func:`cablestore.wire.crypto.verify_pool` that checks signatures
    while this process recomputes views (the two costs are about equal).
    """
    signed = _verified_ahead(posts, pool) if check_signatures and pool is not None else ((h, b, None) for h, b in posts)
    for h, blob, ok in signed:
        if progress is not None:
            progress.advance()
        if h in skip:
            fold.posts += 1
            continue
        fold.add_post(h, blob, on_target.get(h, ()), made_by.get(h, ()), check_signatures, ok)
    return fold


VERIFY_BATCH = 8192  # posts per batch handed to the pool; the next batch is verifying while one is folded


def _verified_ahead(posts, pool):
    """``(hash, blob, signature ok)``, with the pool one batch ahead of the caller."""
    it = iter(posts)
    pending = None
    while True:
        batch = list(islice(it, VERIFY_BATCH))
        ahead = (batch, verify_many([b for _, b in batch], pool)) if batch else None
        if pending is not None:
            for (h, blob), ok in zip(*pending, strict=False):
                yield h, blob, ok
        if ahead is None:
            return
        pending = ahead
