"""Bulk reindex: rebuild every derived view of a store from its primary data.

Incremental ingest reads before it writes (is the post stored? which
candidate is the latest?); a reindex does not.  It drops every derived key,
then streams the primary data once and writes what
:mod:`cablestore.rebuild.recompute` (the rebuild's own recomputation, which
calls the view modules) derives from it, batch by batch, each batch sorted.
The "latest" entries of each group are written last, from the winner kept per
group (its rank and hash, not its bytes); a view with a group per post
(``links``: one per linkable post) derives them instead from the ``!rev!``
range just written (``bulk_latest``), so memory holds no candidate per post.
The result is byte-identical to the views incremental ingest builds from the
same posts.

Primary records the rebuild calls faulty (a damaged or mis-keyed post, one
its author's tombstone names, a damaged tombstone) get no view entries and
are left where they are: ``cablestore check STORE --repair`` quarantines them.
Signatures are not checked: the posts were verified when they were ingested.

A reindex is not one WriteBatch (a million posts' entries would not fit in
memory): interrupted, it leaves views partly built, and running it again (or
``check --repair``) finishes the job.  The store's write lock is held
throughout, so no ingest interleaves.
"""

from __future__ import annotations

import contextlib
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from operator import itemgetter
from typing import TYPE_CHECKING

import plyvel

from cablestore import views
from cablestore.compiled import native as _native
from cablestore.keyspace import reverse
from cablestore.keyspace.keys import next_prefix
from cablestore.moderation import resolve
from cablestore.rebuild.recompute import (
    PRIMARY_PREFIXES,
    Fault,
    classify,
    post_entries,
    render,
    tombstone_status,
    unpack_tombstone,
)
from cablestore.store.gcpause import gc_paused
from cablestore.store.moderation_queries import LOCAL_USER_KEY
from cablestore.store.resolving import moderation_posts
from cablestore.store.txn import DELETED, POSTS
from cablestore.wire.codec import post_hash

if TYPE_CHECKING:
    from cablestore.progress import Progress
    from cablestore.store import Store

_BATCH_KEYS = 200_000  # entries per WriteBatch: bounded memory, few large writes
_PROGRESS_EVERY = 1000  # posts (or keys) between progress updates
# Views with a group per post give every group's latest from the written
# `!rev!` range (``bulk_latest``); the others keep one candidate per group.
_BULK = tuple(v for v in views.VIEWS if hasattr(v, "bulk_latest"))
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


class _Writer:
    """Buffers puts and writes them in bounded WriteBatches, sorted by key, on a thread of its own.

    LevelDB's write (plyvel releases the GIL for it) runs while this thread
    computes the next batch: at 1M posts the writes took 4.7 s of a 16 s
    reindex.  One batch is being written at most, in order; :meth:`flush`
    returns once everything is written (the phases after read what was).
    """

    def __init__(self, db, sync: bool):
        self.db, self.sync = db, sync
        self.puts: list[tuple[bytes, bytes]] = []
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="cablestore-reindex-write")
        self._pending: Future | None = None

    def submit(self, wb) -> None:
        """Write ``wb`` on the writer thread, after the batch before it."""
        self.wait()
        self._pending = self._thread.submit(wb.write)

    def wait(self) -> None:
        """Until the batch being written is written (its error raised here)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def flush_ahead(self) -> None:
        """Hand the buffered puts to the writer thread."""
        if not self.puts:
            return
        # Sorted, LevelDB inserts a batch into its memtable twice as fast; keys
        # are unique, so sorting by key alone (half the cost of comparing tuples).
        self.puts.sort(key=itemgetter(0))
        wb = self.db.write_batch(sync=self.sync)
        if _native is not None:
            _native.put_all(wb.put, self.puts)
        else:
            put = wb.put
            for key, value in self.puts:
                put(key, value)
        self.puts.clear()  # in place: callers may hold the list
        self.submit(wb)

    def flush(self) -> None:
        """Write the buffered puts and wait until all is written."""
        self.flush_ahead()
        self.wait()

    def put_all(self, entries: list) -> int:
        self.puts += entries
        if len(self.puts) >= _BATCH_KEYS:
            self.flush_ahead()
        return len(entries)

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self._thread.shutdown(wait=True)


def reindex(store: Store, progress: Progress | None = None, sync: bool = False) -> ReindexReport:
    """Rebuild every derived view of ``store`` (a :class:`cablestore.Store`) from its primary data."""
    with store._write_lock:
        try:
            return reindex_db(store.db, progress, sync)
        finally:
            store._forget_caches()  # the views were rewritten under the store's caches


def reindex_db(db: plyvel.DB, progress: Progress | None = None, sync: bool = False) -> ReindexReport:
    """:func:`reindex` on a plyvel DB the caller holds exclusively."""
    report = ReindexReport()
    writer = _Writer(db, sync)
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        report.seconds[name] = now - clock
        clock = now

    with gc_paused(), contextlib.closing(writer):
        if progress:
            progress.stage("drop derived views")
        report.dropped = _drop_derived(db, writer, progress)
        lap("drop")
        on_target, made_by = _tombstones(db, report)
        lap("tombstones")
        if progress:
            progress.stage("index posts")
        best = _index_posts(db, writer, on_target, made_by, report, progress)
        lap("posts")
        _write_latest(db, writer, best, report)
        lap("latest")
        report.written += _write_resolved(db, writer)
        lap("moderation")
    if progress:
        progress.done()
    return report


def _write_resolved(db, writer: _Writer) -> int:
    """The resolved moderation entries, from the moderation posts just indexed (what a store's ingest writes)."""
    posts = moderation_posts(lambda prefix: list(db.iterator(prefix=prefix)), lambda h: db.get(POSTS + h))
    if not posts:
        return 0
    written = writer.put_all(views.resolved_entries(resolve(db.get(LOCAL_USER_KEY), posts)))
    writer.flush()
    return written


def _drop_derived(db, writer: _Writer, progress) -> int:
    """Delete every key that is not primary, reading only the ranges between the primary prefixes."""
    dropped = 0
    with db.snapshot() as snap:
        for start, stop in _derived_ranges():
            keys = snap.iterator(start=start, stop=stop, include_value=False)
            while batch := list(islice(keys, _BATCH_KEYS)):
                wb = db.write_batch(sync=writer.sync)
                if _native is not None:
                    _native.delete_all(wb.delete, batch)
                else:
                    for key in batch:
                        wb.delete(key)
                writer.submit(wb)  # written while the next keys are read
                dropped += len(batch)
                if progress:
                    progress.advance(len(batch))
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
    """Tombstones by target and by the post/delete that made them (they are few: kept in memory)."""
    records = []  # a Tombstone or a Fault per record, in key order
    for key, value in db.iterator(prefix=DELETED):
        rest = key[len(DELETED) :]
        records.append(unpack_tombstone(rest[:32], rest[32:], value))
    report.tombstones += len(records)
    # Each tombstone is checked against its post/delete: read them in key
    # order, so each table block is read once, not once per delete in it.
    sound = sorted((i for i, t in enumerate(records) if not isinstance(t, Fault)), key=lambda i: records[i].by)
    statuses, by, blob = {}, None, None
    for i in sound:
        if records[i].by != by:
            by = records[i].by
            blob = db.get(POSTS + by)
        statuses[i] = tombstone_status(records[i], blob)
    on_target: dict[bytes, list] = {}
    made_by: dict[bytes, list] = {}
    for i, tomb in enumerate(records):
        status = tomb if isinstance(tomb, Fault) else statuses[i]
        if isinstance(status, Fault):
            report.faults.append(status)
            continue
        on_target.setdefault(tomb.target, []).append((tomb, status))
        made_by.setdefault(tomb.by, []).append(tomb)
    return on_target, made_by


def _index_posts(db, writer: _Writer, on_target, made_by, report: ReindexReport, progress) -> dict:
    """Write every sound post's entries; return the best candidate of each group of the grouped views."""
    best: dict = {}
    puts = writer.puts  # flush() empties it in place
    posts = indexed = written = 0
    with db.snapshot() as snap:
        stored = snap.iterator(prefix=POSTS)
        if _native is None:
            posts, (indexed, written) = _index_some(stored, writer, on_target, made_by, report, progress, best)
        else:
            # The compiled loop takes the plain posts of each chunk; the rest (tombstones, faults) go the pure way.
            rankers = {v: getattr(v, "rank", None) for v in _GROUPED}
            while chunk := list(islice(stored, _CHUNK)):
                slow, n_indexed, n_written = _native.reindex_chunk(chunk, len(POSTS), on_target, made_by, puts, best, _GROUPED, rankers, post_hash)
                posts += len(chunk) - len(slow)
                indexed += n_indexed
                written += n_written
                if progress:
                    progress.advance(len(chunk) - len(slow))
                n, (w_indexed, w_written) = _index_some(slow, writer, on_target, made_by, report, progress, best)
                posts, indexed, written = posts + n, indexed + w_indexed, written + w_written
                if len(puts) >= _BATCH_KEYS:
                    writer.flush_ahead()
    writer.flush()
    report.posts += posts
    report.indexed += indexed
    report.written += written
    return best


_CHUNK = 1024  # posts per call of the compiled loop


def _index_some(stored, writer: _Writer, on_target, made_by, report: ReindexReport, progress, best: dict) -> tuple[int, tuple[int, int]]:
    """The posts phase in pure Python for ``(key, blob)`` pairs: ``(posts read, (posts indexed, entries written))``."""
    no_tombs: tuple = ()
    puts = writer.puts
    ranked_groups, start = views.ranked_groups, len(POSTS)
    posts = indexed = written = 0
    for key, blob in stored:
        h = key[start:]
        posts += 1
        if progress and not posts % _PROGRESS_EVERY:
            progress.advance(_PROGRESS_EVERY)
        faults, post = classify(h, blob, on_target.get(h, no_tombs), check_signatures=False)
        if faults:
            report.faults.extend(faults)
        if post is None:
            continue
        ip, entries = post_entries(h, blob, post, made_by.get(h, no_tombs))
        indexed += 1
        written += len(entries)
        puts += entries
        if len(puts) >= _BATCH_KEYS:
            writer.flush_ahead()
        for view, group, rank in ranked_groups(ip, _GROUPED):
            held = best.get((view.NAME, group))
            if held is None or rank > held[0]:  # ranks are unique within a group
                best[(view.NAME, group)] = (rank, h)
    return posts, (indexed, written)


def _winner_hash(item) -> bytes:
    return item[1][1]


def _write_latest(db, writer: _Writer, best: dict, report: ReindexReport) -> None:
    """The latest entries: of each held group from its winner, of the bulk views from the ``!rev!`` range."""
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
            keys = snap.iterator(prefix=reverse.PREFIX, include_value=False)
            report.written += writer.put_all(list(view.bulk_latest(keys, snap.get)))
    writer.flush()
