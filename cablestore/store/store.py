"""``Store``: Cable posts in LevelDB, with the views a peer answers requests from.

The hash store (``!post!``) and the tombstones (``!deleted!``) are primary
data; every other key is derived from them by the modules in
``cablestore.views`` and can be rebuilt (see ``cablestore.rebuild``).
Everything one ingest (or one ``ingest_many`` call) writes goes into one
LevelDB WriteBatch, so a crash leaves all of it or none of it.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import plyvel

from cablestore import views
from cablestore.errors import (
    ArgumentError,
    CableError,
    QueryError,
    ReadOnlyStoreError,
    SignatureError,
    StoreClosedError,
    StoreError,
)
from cablestore.keyspace.keys import LOCAL, POSTS, SEARCH_KEY, HashLike, as_hash, channel_key, check_horizon
from cablestore.store import arguments, indexer, membership, opening, peer_reads
from cablestore.store.events import Committed, Listeners
from cablestore.store.gcpause import gc_paused
from cablestore.store.hashfilter import link_filter, tombstone_filter
from cablestore.store.indexing import IndexState
from cablestore.store.inflight import Gate, guard_public_methods, guarded_iter
from cablestore.store.moderation_queries import ModerationQueries, adopt_local_user, local_user_key
from cablestore.store.queries import Queries
from cablestore.store.reading import Reading
from cablestore.store.searching import Searching
from cablestore.store.txn import Txn
from cablestore.store.users import UserQueries
from cablestore.wire.codec import CHANNEL_CODEPOINTS, Post, decode_post, post_hash
from cablestore.wire.crypto import THREADED, check_signature, verify_many, verify_pool

if TYPE_CHECKING:  # the rebuild imports the store: import its Report for hints only
    from cablestore.progress import Progress
    from cablestore.rebuild import MigrateReport, Report

VERIFY_AHEAD = 2  # batches ingest_batches has its workers verify ahead of the one it indexes


def wall_clock_ms() -> int:
    """Milliseconds since the epoch by the wall clock (the default ``now`` of a store)."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class IngestResult:
    """What happened to one post of an ``ingest_many`` call."""

    index: int
    hash: bytes | None
    error: CableError | None = None
    new: bool = False

    @property
    def ok(self) -> bool:
        """True when the post was accepted (stored now or already)."""
        return self.error is None


@guard_public_methods
class Store(Reading, Queries, ModerationQueries, UserQueries, Searching):
    """A Cable post store in a LevelDB directory.

    >>> with Store("/tmp/peer.ldb") as store:        # doctest: +SKIP
    ...     h = store.ingest(post_bytes)
    ...     store.channel_time_range("general", 0, 0, limit=50)

    ``local_user``: the public key (bytes or hex) of whoever this store is
    for, the root of moderation authority; kept in the store once given, and
    a different one later raises :class:`cablestore.errors.LocalUserError`.
    ``path``: the store's directory; ``create=False`` refuses a path that
    holds no store (:class:`cablestore.errors.StoreNotFoundError`) instead
    of creating one.  ``now``: a callable returning the current time in ms
    (for tests).
    ``sync``: write every batch with LevelDB's sync flag (durable against
    power loss, not only process crashes).  ``verify_signatures=False`` is
    for re-indexing posts already verified once.  ``verify_workers=N`` lets
    ``ingest_many`` verify signatures in N threads while it indexes (with
    the compiled verifier, which releases the GIL; otherwise in N worker
    processes, which never import the main script, and 1 verifies in this
    process); 0 to 256, 0 verifies in the ingesting thread.  ``cache_mb``
    (0 to 65536) and ``write_buffer_mb`` (1 to 4096) size LevelDB's block
    cache and memtable.  A wrong type or value raises
    :class:`cablestore.errors.ArgumentError` before anything is created.
    ``readonly=True`` opens an existing store without writing a byte in its
    directory (``create`` is then ignored), also on read-only media: every
    write (``ingest``, ``delete``, ``check(fix=True)``, ...) raises
    :class:`cablestore.errors.ReadOnlyStoreError`, and a store another
    process holds open raises :class:`cablestore.errors.StoreLockedError`
    (see :mod:`cablestore.store.readonly`).
    ``search=True`` keeps the full-text index :meth:`search` reads (built
    now for the posts held, as :meth:`enable_search` does); a store keeps
    it once it has it, until :meth:`disable_search`.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        create: bool = True,
        sync: bool = False,
        verify_signatures: bool = True,
        verify_workers: int = 0,
        now: Callable[[], int] | None = None,
        cache_mb: int = opening.DEFAULT_CACHE_MB,
        write_buffer_mb: int = 64,
        local_user: HashLike | None = None,
        readonly: bool = False,
        search: bool = False,
    ) -> None:
        self.path = arguments.store_path(path)
        if not isinstance(readonly, bool):
            raise ArgumentError(f"readonly is True or False, not {readonly!r}")
        if not isinstance(search, bool):
            raise ArgumentError(f"search is True or False, not {search!r}")
        self.readonly = readonly
        arguments.check_options(verify_workers=verify_workers, now=now, cache_mb=cache_mb, write_buffer_mb=write_buffer_mb)
        self.sync = sync
        self.verify_signatures = verify_signatures
        self.verify_workers = verify_workers
        self._verify_pool = None
        self._now = now or wall_clock_ms
        self._write_lock = threading.Lock()
        self._listeners = Listeners()
        self._tomb_filter = self._link_filter = None  # made on the first write (cablestore.store.hashfilter)
        self._winners: dict = {}  # latest candidate per group, as committed (see cablestore.store.indexing)
        self._gate = Gate(reopen=self._reopen)
        self._sizes = dict(cache_mb=cache_mb, write_buffer_mb=write_buffer_mb)
        local_user = local_user_key(local_user)  # before anything is opened or created
        self._db, self._registered, self._links = opening.open_db(self.path, create=create, readonly=readonly, **self._sizes)
        try:
            self.local_user = adopt_local_user(self._db, local_user, readonly=readonly)
            self._search = self._db.get(SEARCH_KEY) is not None  # the store keeps the search view (views/search.py)
            if search and not self._search:
                self.enable_search()
        except BaseException:
            self._db.close()
            if self._links is not None:
                self._links.remove()
            opening.release(self._registered)
            raise

    # --- lifecycle ------------------------------------------------------
    def close(self) -> None:
        """Wait for calls in flight, then close; later calls raise :class:`StoreClosedError`."""
        if not self._gate.shut():
            return
        if self._verify_pool is not None:
            self._verify_pool.shutdown(wait=True, cancel_futures=True)
            self._verify_pool = None
        opening.close_db(self._db, self._registered, self._links)

    def _reopen(self) -> None:
        """Close and reopen LevelDB (no call in flight): clears its sticky write error."""
        self._db.close()
        self._db = opening.reopen_db(self.path, self._links, **self._sizes)
        self._forget_caches()  # what was written before the failure is not known; the filters read the old DB

    @property
    def closed(self) -> bool:
        """True once :meth:`close` began."""
        return self._gate.closed

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def db(self) -> plyvel.DB:
        """The underlying plyvel database (for tools; use it inside :meth:`in_flight`); raises :class:`StoreClosedError` once closed."""
        if self._db.closed:
            raise StoreClosedError("the store is closed")
        return self._db

    def in_flight(self) -> AbstractContextManager[None]:
        """A block ``close()`` waits for, whose plyvel errors become CableErrors.

        >>> with store.in_flight():                     # doctest: +SKIP
        ...     export(store.db, "snap/")
        """
        return self._gate.call(self.path)

    # --- ingest ---------------------------------------------------------
    def validate(self, buf: bytes, now: int | None = None) -> tuple[bytes, Post]:
        """Decode and check one post as a host must before accepting it.

        Returns ``(hash, post)``; raises a :class:`CableError` subclass.
        """
        h, post = self._check_fields(buf, now)
        if self.verify_signatures:
            check_signature(buf)
        return h, post

    def _pool(self):
        # One verify thread already overlaps with indexing; one worker process would not pay for its pickling.
        if self.verify_workers > (0 if THREADED else 1) and self._verify_pool is None:
            self._verify_pool = verify_pool(self.verify_workers)
        return self._verify_pool

    def _writable(self) -> None:
        """Raise :class:`ReadOnlyStoreError` if the store was opened with ``readonly=True`` (before a write)."""
        if self.readonly:
            raise ReadOnlyStoreError(f"{self.path} is open read-only (readonly=True): it cannot be written")

    def _batch(self) -> IndexState:
        """A write transaction and its indexing state (call with the write lock held); written by :meth:`_commit`."""
        self._writable()
        if self._tomb_filter is None:
            self._tomb_filter, self._link_filter = tombstone_filter(self.db), link_filter(self.db)
        self._tomb_filter.grow_if_full()
        self._link_filter.grow_if_full()
        return IndexState(Txn(self.db), self._tomb_filter, self._winners, link_filter=self._link_filter, search=self._search)

    def _commit(self, batch: IndexState) -> None:
        indexer.commit(batch, self.local_user, self.sync)

    def join_cabal(self, cabal_key: bytes) -> None:
        """Tie the store to the cabal of ``cabal_key`` (a digest is kept, never the key); another cabal's key raises :class:`CabalMismatchError`.

        A private ``serve`` or ``sync`` calls it before any byte is exchanged,
        so two cabals are never mixed in one store.
        """
        with self._write_lock:
            membership.adopt_cabal(self.db, cabal_key)

    def _forget_caches(self) -> None:
        """Drop what the store remembers of its views: after writes not made by its transactions (a repair, a reindex, a reopen)."""
        self._winners.clear()
        self._tomb_filter = self._link_filter = None

    def _check_fields(self, buf: bytes, now: int | None) -> tuple[bytes, Post]:
        post = decode_post(buf)
        now = self._now() if now is None else now
        check_horizon(post.timestamp, now)
        return post_hash(buf), post

    def subscribe(self, callback: Callable[[Committed], None]) -> Callable[[], None]:
        """Call ``callback(Committed)`` after every commit that adds or removes posts.

        Returns a function that unsubscribes.  See :mod:`cablestore.store.events`.
        """
        return self._listeners.subscribe(callback)

    def ingest(self, buf: bytes, *, now: int | None = None, extra: dict[bytes, bytes] | None = None) -> bytes:
        """Validate and store one post with all its view entries; return its hash.

        Storing a post already stored is a no-op.  A refused post raises and
        leaves the store unchanged.  ``extra``: more ``!local!`` keys to write
        in the same WriteBatch (an author's clock, a sync cursor), so they
        land with the post or not at all.
        """
        self._writable()
        buf = arguments.post_bytes(buf)
        h, post = self.validate(buf, now)
        with self._write_lock:
            batch = self._batch()
            outcome = indexer.apply(batch, buf, h, post)
            for key, value in (extra or {}).items():
                if not key.startswith(LOCAL):
                    raise StoreError(f"extra keys live under {LOCAL!r}, not {key[:16]!r}")
                batch.put(key, value)
            self._commit(batch)
        self._listeners.notify(batch.committed())
        if isinstance(outcome, CableError):
            raise outcome
        if h in batch.enforced:  # stored, then kept out by the moderation state it changed
            raise batch.enforced[h]
        return h

    def ingest_many(self, bufs: Iterable[bytes], *, now: int | None = None) -> list[IngestResult]:
        """Ingest posts in order, in one WriteBatch; refusals are reported per item.

        With ``verify_workers``, signatures are verified by that many workers
        while this thread indexes the posts already checked.
        """
        self._writable()
        with gc_paused():  # a batch's objects make no cycles: see cablestore.store.gcpause
            return self._ingest_many(bufs, now)

    def ingest_batches(self, batches: Iterable[Iterable[bytes]], *, now: int | None = None) -> Iterator[list[IngestResult]]:
        """:meth:`ingest_many` of each batch in turn (one WriteBatch each), yielding each batch's results.

        With ``verify_workers`` the workers check the next batches'
        signatures (``VERIFY_AHEAD`` of them) while this thread indexes the
        current one, so neither waits for the other between batches;
        ``VERIFY_AHEAD + 1`` batches are held at most.
        A bad batch (not a list of bytes) raises when it is reached: the
        batches before it are stored.
        """
        self._writable()
        pending: deque = deque()
        for batch in batches:
            bufs = arguments.post_list(batch)
            pending.append((bufs, self._signatures(bufs)))  # the workers start on it now
            if len(pending) > VERIFY_AHEAD:
                with gc_paused():  # not across the yield: the caller's code runs with the collector on
                    results = self._ingest_checked(*pending.popleft(), now)
                yield results
        while pending:
            with gc_paused():
                results = self._ingest_checked(*pending.popleft(), now)
            yield results

    def _signatures(self, bufs: list[bytes]) -> Iterator[bool] | None:
        # Verification needs only the bytes: start it first, decode meanwhile.
        return verify_many(bufs, self._pool()) if self.verify_signatures else None

    def _ingest_many(self, bufs: Iterable[bytes], now: int | None) -> list[IngestResult]:
        bufs = arguments.post_list(bufs)
        return self._ingest_checked(bufs, self._signatures(bufs), now)

    def _ingest_checked(self, bufs: list[bytes], signatures: Iterator[bool] | None, now: int | None) -> list[IngestResult]:
        now = self._now() if now is None else now
        checked = []
        for i, buf in enumerate(bufs):
            try:
                checked.append((i, buf, *self._check_fields(buf, now), None))
            except CableError as exc:
                checked.append((i, buf, None, None, exc))
        results = []
        with self._write_lock:
            batch = self._batch()
            for i, buf, h, post, error in checked:
                signed = next(signatures) if signatures is not None else True
                if error is None and not signed:
                    error = SignatureError("Ed25519 signature does not verify")
                if error is None:
                    try:
                        outcome = indexer.apply(batch, buf, h, post)
                    except CableError as exc:
                        outcome = exc
                    if not isinstance(outcome, CableError):
                        results.append(IngestResult(i, h, None, outcome))
                        continue
                    error = outcome
                results.append(IngestResult(i, h, error))
            self._commit(batch)
        self._listeners.notify(batch.committed())
        # A post stored early in the batch and kept out by a moderation post later in it is not stored.
        return [IngestResult(r.index, r.hash, batch.enforced[r.hash]) if r.ok and r.hash in batch.enforced else r for r in results]

    def learn_listing(self, channel: str, hashes: Iterable[HashLike]) -> int:
        """Record that a peer listed these posts in ``channel``'s time range; return how many deletes that re-listed.

        A post/delete names no channel: it is listed under the channels of
        the posts it deleted.  A store that never held those posts learns
        the channel only from the peer that listed the delete, so the sync
        layer passes it on here.  Posts that are not stored post/deletes,
        and deletes whose targets the store knows, are left as they are.
        """
        self._writable()
        hashes = [as_hash(h) for h in hashes]
        channel_key(channel)  # a bad name is the caller's error, before any write
        lo, hi = CHANNEL_CODEPOINTS
        if not lo <= len(channel) <= hi:
            raise QueryError(f"a channel name has {lo} to {hi} codepoints, not {len(channel)}")
        with self._write_lock:
            batch = self._batch()
            learned = sum(indexer.learn_listing(batch, h, channel) for h in hashes)
            if learned:
                self._commit(batch)
        if learned:
            self._listeners.notify(batch.committed())
        return learned

    # --- local removal --------------------------------------------------
    def delete(self, h: HashLike) -> bool:
        """Discard a post locally, without a post/delete and without a tombstone.

        Returns False if the post was not stored.  Tombstones a discarded
        post/delete made are kept: the deletion it carried still holds, and a
        later post/delete of the discarded delete cannot lift it (the store no
        longer holds the delete, so it cannot tell what it targeted).
        """
        self._writable()
        h = as_hash(h)
        with self._write_lock:
            batch = self._batch()
            blob = batch.get(POSTS + h)
            if blob is None:
                return False
            indexer.unindex(batch, h, blob, forget_tombstones=False)
            self._commit(batch)
        self._listeners.notify(batch.committed())
        return True

    def purge_author(self, public_key: HashLike) -> int:
        """Remove every post an author wrote (for blocking); return how many."""
        self._writable()
        public_key = as_hash(public_key)
        with self._write_lock:
            batch = self._batch()
            prefix = views.author.prefix(public_key)
            hashes = [k[-32:] for k in self.db.iterator(prefix=prefix, include_value=False)]
            for h in hashes:
                blob = batch.get(POSTS + h)
                if blob is not None:
                    indexer.unindex(batch, h, blob, forget_tombstones=False)
            self._commit(batch)
        self._listeners.notify(batch.committed())
        return len(hashes)

    # --- verification ---------------------------------------------------
    def check(self, fix: bool = False, engine: str = "local", **kw: Any) -> Report:
        """Recompute every derived view and compare; with ``fix``, repair.

        Returns a :class:`cablestore.rebuild.Report` (``report.consistent``).
        """
        from cablestore.rebuild import check

        if fix:
            self._writable()
        try:
            return check(self, fix=fix, engine=engine, **kw)
        finally:
            self._forget_caches()  # a repair writes views directly

    @staticmethod
    def migrate(path: str | os.PathLike, progress: Progress | None = None) -> MigrateReport:
        """Upgrade the store at ``path`` (closed) from an older keyspace format to the current one.

        Opening a store of format ``cablestore-1`` raises
        :class:`cablestore.errors.MigrationNeededError`; this rewrites its
        derived rows (a reindex), then marks it ``cablestore-2``.  Resumable:
        interrupted, the store stays in the old format and migrating again
        finishes.  A store in the current format is left as it is.  Returns
        a :class:`cablestore.rebuild.migration.MigrateReport`
        (``cablestore migrate STORE`` runs it; docs/operations.md, "Upgrading").
        """
        from cablestore.rebuild import migrate

        return migrate(path, progress)

    def items(self, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """Every raw key/value pair (for tools and tests), in key order."""
        return guarded_iter(self, self.db.iterator(prefix=prefix))

    # --- what a peer reads and writes (cablestore.store.peer_reads) -------
    def channel_state_answer(self, channel: str) -> list[bytes]:
        """The hashes answering a Cable channel state request (:func:`cablestore.store.peer_reads.channel_state_answer`)."""
        return peer_reads.channel_state_answer(self, channel)

    def time_range_page(self, channel: str, start: int, end: int, below: bytes | None, n: int) -> list[bytes]:
        """Up to ``n`` ``!chat`` keys of a time range, newest first, below ``below`` (:func:`cablestore.store.peer_reads.time_range_page`)."""
        return peer_reads.time_range_page(self, channel, start, end, below, n)

    def tombstoned(self, hashes: list[bytes]) -> set[bytes]:
        """The hashes among ``hashes`` with a tombstone (:func:`cablestore.store.peer_reads.tombstoned`)."""
        return peer_reads.tombstoned(self, hashes)

    def any_member(self, channel: str, public_keys: Iterable[bytes]) -> bool:
        """One of ``public_keys`` is a member or ex-member of ``channel`` (:func:`cablestore.store.peer_reads.any_member`)."""
        return peer_reads.any_member(self, channel, public_keys)

    def check_relayed(self, buf: bytes, now: int) -> bytes:
        """Check a post relayed for a forwarded request; its hash (:func:`cablestore.store.peer_reads.check_relayed`)."""
        return peer_reads.check_relayed(self, buf, now)

    def has_posts(self) -> bool:
        """True if the store holds any post."""
        return peer_reads.has_posts(self)

    def shunned(self, user: bytes) -> frozenset[bytes]:
        """Authors left out of post responses to an authenticated ``user`` (:func:`cablestore.store.peer_reads.shunned`)."""
        return peer_reads.shunned(self, bytes(user))

    def known_user(self, public_key: bytes) -> bool:
        """An author of a stored post, a user a block or the moderation seed names (:func:`cablestore.store.peer_reads.known_user`)."""
        return peer_reads.known_user(self, bytes(public_key))

    def sync_cursor(self, peer: str, channel: str) -> int | None:
        """The sync cursor of ``channel`` from ``peer`` (ms), or None (:func:`cablestore.store.peer_reads.sync_cursor`)."""
        return peer_reads.sync_cursor(self, peer, channel)

    def set_sync_cursor(self, peer: str, channel: str, timestamp: int) -> None:
        """Move the sync cursor forward, under the write lock (:func:`cablestore.store.peer_reads.set_sync_cursor`)."""
        peer_reads.set_sync_cursor(self, peer, channel, timestamp)


__all__ = ["Store", "IngestResult", "wall_clock_ms"]
