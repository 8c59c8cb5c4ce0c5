"""Bulk reindex: rebuild every derived view of a store from its primary data.

Incremental ingest reads before it writes (is the post stored? which
candidate is the latest?); a reindex does not.  It drops every derived key,
then streams the primary data once and writes what
:mod:`cablestore.rebuild.recompute` (the rebuild's own recomputation, which
calls the view modules) derives from it, batch by batch, each batch sorted.
The "latest" entries of each group are written last, from the winner kept per
group (its rank and hash, not its bytes); a view with a group per post
(``links``: one per linkable post) derives them instead from the ``!post!``
keys and its own entries just written (``bulk_latest``), so memory holds no
candidate per post.
The result is byte-identical to the views incremental ingest builds from the
same posts.

Primary records the rebuild calls faulty (a damaged or mis-keyed post, one
its author's tombstone names, a damaged tombstone) get no view entries and
are left where they are: ``cablestore check STORE --repair`` quarantines them.
Signatures are not checked: the posts were verified when they were ingested.

A reindex is not one WriteBatch (a million posts' entries would not fit in
memory): interrupted, it leaves views partly built, and running it again (or
``check --repair``) finishes the job.  ``!local!reindexing``, written when it
starts and deleted when it ends, marks one interrupted (``check`` says so).  The store's write lock is held
throughout, so no ingest interleaves.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING

import plyvel

from cablestore import views
from cablestore.compiled import native as _native
from cablestore.keyspace.keys import CHAT, DELETED, LOCAL_USER_KEY, POSTS, REINDEXING, SEARCH_KEY, next_prefix
from cablestore.moderation import resolve
from cablestore.rebuild.batchwriter import BatchWriter
from cablestore.rebuild.recompute import (
    PRIMARY_PREFIXES,
    Fault,
    classify,
    post_entries,
    render,
    tombstone_status,
    unpack_tombstone,
)
from cablestore.store.search_index.postings import index_entries
from cablestore.store.write.gcpause import gc_paused
from cablestore.store.write.resolving import moderation_posts, stored_seed
from cablestore.store.write.writer import Lease
from cablestore.views import recon as recon_view
from cablestore.wire.codec import post_hash

if TYPE_CHECKING:
    from cablestore.progress import Progress
    from cablestore.store import Store

_BATCH_KEYS = 200_000  # entries per WriteBatch: bounded memory, few large writes
_PROGRESS_EVERY = 1000  # posts (or keys) between progress updates
# Views with a group per post give every group's latest from the post keys and
# their own written entries (``bulk_latest``); the others keep one candidate per group.
_BULK = tuple(v for v in views.VIEWS if v.BULK_LATEST)
_GROUPED = tuple(v for v in views.VIEWS if v not in _BULK)


@dataclass
class ReindexReport:
    """What a reindex did: counts, faults left in place, seconds per phase."""

    posts: int = 0
    indexed: int = 0
    tombstones: int = 0
    dropped: int = 0  # derived keys removed before rebuilding
    written: int = 0  # derived keys written
    faults: list = field(default_factory=list)
    seconds: dict = field(default_factory=dict)

    @property
    def posts_per_s(self) -> float:
        """Posts read per second of the whole reindex."""
        total = sum(self.seconds.values())
        return self.posts / total if total else 0.0

    def to_dict(self) -> dict:
        """The report as JSON-ready data (what ``cablestore reindex --json`` prints)."""
        return {
            "posts": self.posts,
            "indexed": self.indexed,
            "tombstones": self.tombstones,
            "dropped": self.dropped,
            "written": self.written,
            "faults": [{"kind": f.kind, "hash": f.hash.hex(), "detail": f.detail} for f in self.faults],
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "posts_per_s": round(self.posts_per_s),
        }


def reindex(store: Store, progress: Progress | None = None, sync: bool = False) -> ReindexReport:
    """Rebuild every derived view of ``store`` (a :class:`cablestore.Store`) from its primary data."""
    with store.writer.lease() as lease:  # read-only: ReadOnlyStoreError; the writer forgets its view caches after
        return reindex_db(lease, progress, sync)


def reindex_db(lease: Lease, progress: Progress | None = None, sync: bool = False) -> ReindexReport:
    """:func:`reindex` through a :class:`cablestore.store.write.writer.Lease` (the store's, or one on a directory no Store has open)."""
    db = lease.db
    report = ReindexReport()
    writer = BatchWriter(lease, sync, _BATCH_KEYS)
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        report.seconds[name] = now - clock
        clock = now

    lease.put(REINDEXING, b"", sync=True)  # deleted below, once every view is written
    with gc_paused(), contextlib.closing(writer):
        if progress:
            progress.stage("drop derived views")
        report.dropped = _drop_derived(lease, writer, progress)
        lap("drop")
        on_target, made_by = _tombstones(db, report)
        lap("tombstones")
        if progress:
            progress.stage("index posts")
        best, unindexed = _index_posts(db, writer, on_target, made_by, report, progress)
        lap("posts")
        _write_latest(db, writer, best, unindexed, report)
        lap("latest")
        report.written += _write_sums(db, writer)
        lap("recon")
        report.written += _write_resolved(db, writer)
        lap("moderation")
        if db.get(SEARCH_KEY) is not None:
            report.written += write_search(db, writer, unindexed)
            lap("search")
    lease.delete(REINDEXING, sync=sync)
    # In the order `check` lists them, not the order the checks ran in.
    report.faults.sort(key=Fault.sort_key)
    if progress:
        progress.done()
    return report


def _write_sums(db, writer: BatchWriter) -> int:
    """The range sums (``views/recon.py``), read off the ``!chat`` rows just written: one pass in key order."""
    written = 0
    with db.snapshot() as snap:
        rows = recon_view.rows_from_chat(snap.iterator(prefix=CHAT, include_value=False))
        while chunk := list(islice(rows, writer.batch_keys)):
            written += writer.put_all(chunk)
    writer.flush()
    return written


def _write_resolved(db, writer: BatchWriter) -> int:
    """The resolved moderation entries, from the moderation posts just indexed (what a store's ingest writes)."""
    posts = moderation_posts(lambda prefix: list(db.iterator(prefix=prefix)), lambda h: db.get(POSTS + h))
    seed = stored_seed(db.get)
    if not posts and not seed.roles:
        return 0
    written = writer.put_all(views.resolved_entries(resolve(db.get(LOCAL_USER_KEY), posts, seed)))
    writer.flush()
    return written


def write_search(db: plyvel.DB, writer: BatchWriter, skip: Collection[bytes] = frozenset()) -> int:
    """The search entries of every indexed post (``cablestore.store.search_index.searcher.index_entries``); returns how many.

    A pass of its own, run only for a store with search enabled: the
    compiled posts pass knows nothing of the view, so a store without it
    pays nothing.
    """
    written = 0
    with db.snapshot() as snap:
        entries = index_entries(snap, skip)
        while chunk := list(islice(entries, writer.batch_keys)):
            written += writer.put_all(chunk)
    writer.flush()
    return written


def _drop_derived(lease: Lease, writer: BatchWriter, progress) -> int:
    """Delete every key that is not primary, reading only the ranges between the primary prefixes."""
    dropped = 0
    with lease.db.snapshot() as snap:
        for start, stop in _derived_ranges():
            keys = snap.iterator(start=start, stop=stop, include_value=False)
            while True:
                wb = lease.write_batch(sync=writer.sync)
                if _native is not None:  # the keys go from the iterator to the batch, never into a list
                    n = _native.delete_some(wb.delete, keys, writer.batch_keys)
                else:
                    n = 0
                    for key in islice(keys, writer.batch_keys):
                        wb.delete(key)
                        n += 1
                if not n:
                    break
                writer.submit(wb)  # written while the next keys are read
                dropped += n
                if progress:
                    progress.advance(n)
    writer.wait()
    return dropped


def _derived_ranges() -> list[tuple[bytes | None, bytes | None]]:
    """``(start, stop)`` key ranges covering every key outside the primary prefixes (None: unbounded)."""
    ranges, start = [], None
    for prefix in sorted(PRIMARY_PREFIXES):
        ranges.append((start, prefix))
        start = next_prefix(prefix)
    ranges.append((start, None))
    return ranges

def _tombstones(db, report: ReindexReport):
    """Tombstones by target and by the post/delete that made them (they are few: kept in memory).

    Only the records are read here; each is checked against its post/delete
    in the posts pass (:class:`_TombstoneChecks`), which reads that anyway.
    """
    on_target: dict[bytes, list] = {}
    made_by: dict[bytes, list] = {}
    for key, value in db.iterator(prefix=DELETED):
        rest = key[len(DELETED) :]
        tomb = unpack_tombstone(rest[:32], rest[32:], value)
        report.tombstones += 1
        if isinstance(tomb, Fault):
            report.faults.append(tomb)
            continue
        on_target.setdefault(tomb.target, []).append(tomb)
        made_by.setdefault(tomb.by, []).append(tomb)
    return on_target, made_by


class _TombstoneChecks:
    """Each tombstone checked once against its stored post/delete (``tombstone_status``).

    The posts pass reads every post/delete in key order, so a tombstone is
    checked when its post/delete comes by, its bytes in hand.  A post some
    tombstone names is set aside (:meth:`defer`) and indexed after the pass,
    when every stored post/delete has been read: a tombstone not checked by
    then has no stored post/delete (what a point read would have said; it
    is still asked, to be sure).  A record its post/delete contradicts is a
    fault, reported once, and left out everywhere: the result is what
    checking every record before the pass gave, without a point read per
    delete (0.9 s of a 1M-post reindex).
    """

    def __init__(self, get, report: ReindexReport):
        self._get, self._report = get, report
        self._status: dict[tuple[bytes, bytes], object] = {}
        self.deferred: list[tuple[bytes, bytes, list]] = []  # (hash, bytes, sound tombstones it made)

    def _check(self, tomb, blob_of) -> object:
        key = (tomb.target, tomb.by)
        status = self._status.get(key)
        if status is None:
            status = self._status[key] = tombstone_status(tomb, blob_of(tomb.by))
            if isinstance(status, Fault):
                self._report.faults.append(status)
        return status

    def made(self, blob: bytes, tombs: list) -> list:
        """The sound tombstones among ``tombs``, made by the post/delete ``blob``."""
        return [t for t in tombs if not isinstance(self._check(t, lambda _: blob), Fault)]

    def defer(self, h: bytes, blob: bytes, made: list) -> None:
        """Index the post ``h``, which tombstones name, after the pass."""
        self.deferred.append((h, blob, made))

    def on(self, tombs: list) -> list:
        """``(tombstone, status)`` for the sound tombstones among ``tombs`` (which name one post)."""
        pairs = ((t, self._check(t, self._blob)) for t in tombs)
        return [(t, status) for t, status in pairs if not isinstance(status, Fault)]

    def _blob(self, h: bytes) -> bytes | None:
        return self._get(POSTS + h)


@dataclass
class _Pass:
    """What the posts pass carries: where entries go, the tombstones, the best candidates, the counts."""

    writer: BatchWriter
    report: ReindexReport
    on_target: dict
    made_by: dict
    checks: _TombstoneChecks
    best: dict = field(default_factory=dict)
    unindexed: set = field(default_factory=set)  # stored posts the rebuild calls faulty: no entries
    indexed: int = 0
    written: int = 0


def _index_posts(db, writer: BatchWriter, on_target, made_by, report: ReindexReport, progress) -> dict:
    """Write every sound post's entries; return the best candidate of each group of the grouped views, and the posts left unindexed."""
    puts = writer.puts  # flush() empties it in place
    posts = 0
    with db.snapshot() as snap:
        stored = snap.iterator(prefix=POSTS)
        run = _Pass(writer, report, on_target, made_by, _TombstoneChecks(snap.get, report))
        if _native is None:
            posts = _index_some(stored, run, progress)
        else:
            # The compiled loop takes the plain posts of each chunk; the rest (tombstones, faults) go the pure way.
            rankers = {v: views.RANKERS[v] for v in _GROUPED}
            while chunk := list(islice(stored, _CHUNK)):
                slow, n_indexed, n_written = _native.reindex_chunk(chunk, len(POSTS), on_target, made_by, puts, run.best, _GROUPED, rankers, post_hash)
                posts += len(chunk) - len(slow)
                run.indexed += n_indexed
                run.written += n_written
                if progress:
                    progress.advance(len(chunk) - len(slow))
                posts += _index_some(slow, run, progress)
                if len(puts) >= writer.batch_keys:
                    writer.flush_ahead()
        for h, blob, made in run.checks.deferred:
            _index_post(h, blob, run.checks.on(on_target[h]), made, run)
    writer.flush()
    report.posts += posts
    report.indexed += run.indexed
    report.written += run.written
    return run.best, run.unindexed


_CHUNK = 1024  # posts per call of the compiled loop
_NO_TOMBS: list = []


def _index_some(stored, run: _Pass, progress) -> int:
    """The posts phase in pure Python for ``(key, blob)`` pairs; returns how many were read."""
    made_by, on_target, checks, start = run.made_by, run.on_target, run.checks, len(POSTS)
    posts = 0
    for key, blob in stored:
        h = key[start:]
        posts += 1
        if progress and not posts % _PROGRESS_EVERY:
            progress.advance(_PROGRESS_EVERY)
        made = made_by.get(h)
        made = checks.made(blob, made) if made else _NO_TOMBS
        if h in on_target:
            checks.defer(h, blob, made)
        else:
            _index_post(h, blob, _NO_TOMBS, made, run)
    if progress and posts % _PROGRESS_EVERY:
        progress.advance(posts % _PROGRESS_EVERY)  # the last ones counted too
    return posts


def _index_post(h: bytes, blob: bytes, named: list, made: list, run: _Pass) -> None:
    """One stored post: classified with the tombstones that name it, then its entries and candidates."""
    faults, post = classify(h, blob, named, check_signatures=False)
    if faults:
        run.report.faults.extend(faults)
    if post is None:
        run.unindexed.add(h)
        return
    ip, entries = post_entries(h, blob, post, made)
    run.indexed += 1
    run.written += len(entries)
    puts = run.writer.puts
    puts += entries
    if len(puts) >= run.writer.batch_keys:
        run.writer.flush_ahead()
    best = run.best
    for view, group, rank in views.ranked_groups(ip, _GROUPED):
        held = best.get((view.NAME, group))
        if held is None or rank > held[0]:  # ranks are unique within a group
            best[(view.NAME, group)] = (rank, h)


def _winner_hash(item) -> bytes:
    return item[1][1]


def _write_latest(db, writer: BatchWriter, best: dict, unindexed: set, report: ReindexReport) -> None:
    """The latest entries: of each held group from its winner, of the bulk views from the post keys and their own entries."""
    # Winners read in key order: each table block once, and a post that wins
    # several groups once.
    h_read, blob = None, None
    for (view_name, group), (rank, h) in sorted(best.items(), key=_winner_hash):
        if h != h_read:
            h_read, blob = h, db.get(POSTS + h)
        report.written += writer.put_all(render(view_name, group, (rank, h, blob)))
    writer.flush()
    for view in _BULK:
        with db.snapshot() as snap:
            post_keys = snap.iterator(prefix=POSTS, include_value=False)
            own_keys = snap.iterator(prefix=view.BULK_PREFIX, include_value=False)
            report.written += writer.put_all(list(view.bulk_latest(post_keys, own_keys, snap.get, unindexed)))
    writer.flush()
