"""``Store``: Cable posts in LevelDB, with the views a peer answers requests from.

The hash store (``!post!``) and the tombstones (``!deleted!``) are primary
data; every other key is derived from them by the modules in
``cablestore.views`` and can be rebuilt (see ``cablestore.rebuild``).
Everything one ingest (or one ``ingest_many`` call) writes goes into one
LevelDB WriteBatch, so a crash leaves all of it or none of it.

``Store`` is a facade over components, each holding its own state and
handed what it needs at construction: the :class:`cablestore.store.handle.Handle`
(path, LevelDB, gate, options), the :class:`cablestore.store.write.writer.Writer`
(the one door of every write), :class:`cablestore.store.write.ingest.Ingest` (posts
in and out), the readers (:class:`cablestore.store.read.hashes.Queries`,
:class:`cablestore.store.read.decoded.Reading`, :class:`cablestore.store.read.users.UserQueries`,
the peer's reads in :mod:`cablestore.store.read.peer`), moderation
(:class:`cablestore.store.read.moderation.ModerationQueries`) and search
(:class:`cablestore.store.search_index.searcher.Searching`).  Every public method is a
delegation, guarded by the store's gate.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import plyvel

from cablestore.errors import ArgumentError
from cablestore.keyspace.keys import SEARCH_KEY, HashLike
from cablestore.store import arguments
from cablestore.store.events import Committed, Listeners
from cablestore.store.handle import Handle, wall_clock_ms
from cablestore.store.lifecycle import cabal, opening
from cablestore.store.lifecycle.inflight import Gate, guard_public_methods, guarded_iter
from cablestore.store.read import peer as peer_reads
from cablestore.store.read.decoded import Reading
from cablestore.store.read.hashes import Queries
from cablestore.store.read.lost import LostPosts
from cablestore.store.read.moderation import ModerationQueries, adopt_local_user, local_user_key
from cablestore.store.read.users import UserQueries
from cablestore.store.search_index.searcher import Searching
from cablestore.store.write.ingest import VERIFY_AHEAD, Ingest, IngestResult
from cablestore.store.write.writer import Writer

if TYPE_CHECKING:  # the rebuild imports the store: import its Report for hints only
    from cablestore.progress import Progress
    from cablestore.rebuild import MigrateReport, Report


def _to(component: str, function: Callable) -> Callable:
    """A Store method calling ``function``'s namesake on the component ``self.<component>`` (its docstring and signature kept)."""
    name = function.__name__
    if inspect.isgeneratorfunction(function):  # a generator stays one, so the gate guards each of its steps

        @functools.wraps(function)
        def steps(self: Store, *args: Any, **kwargs: Any) -> Any:
            yield from getattr(getattr(self, component), name)(*args, **kwargs)

        return steps

    @functools.wraps(function)
    def method(self: Store, *args: Any, **kwargs: Any) -> Any:
        return getattr(getattr(self, component), name)(*args, **kwargs)

    return method


@guard_public_methods
class Store:
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
    (see :mod:`cablestore.store.lifecycle.readonly`).
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
        arguments.check_options(verify_workers=verify_workers, now=now, cache_mb=cache_mb, write_buffer_mb=write_buffer_mb)
        self._sizes = dict(cache_mb=cache_mb, write_buffer_mb=write_buffer_mb)
        local_user = local_user_key(local_user)  # before anything is opened or created
        db, self._registered, self._links = opening.open_db(self.path, create=create, readonly=readonly, **self._sizes)
        self._handle = handle = Handle(self.path, db, readonly=readonly, sync=sync, now=now, gate=Gate(reopen=self._reopen))
        try:
            self._listeners = Listeners()
            self.writer = Writer(handle, self._listeners, search=db.get(SEARCH_KEY) is not None)
            self._ingest = Ingest(handle, self.writer, verify_signatures=verify_signatures, verify_workers=verify_workers)
            self._queries = Queries(handle)
            self._reading = Reading(handle, self._queries)
            self._moderation = ModerationQueries(handle, self.writer, self._queries)
            self._users = UserQueries(handle, self._moderation)
            self._searching = Searching(handle, self.writer)
            self._lost = LostPosts(handle, self.writer)
            handle.local_user = adopt_local_user(handle, self.writer, local_user)
            if search and not self.writer.search:
                self._searching.enable_search()
        except BaseException:
            db.close()
            if self._links is not None:
                self._links.remove()
            opening.release(self._registered)
            raise

    # --- options and lifecycle -------------------------------------------
    @property
    def readonly(self) -> bool:
        """True if the store was opened with ``readonly=True``: every write raises."""
        return self._handle.readonly

    @property
    def sync(self) -> bool:
        """True if every batch is written with LevelDB's sync flag."""
        return self._handle.sync

    @property
    def local_user(self) -> bytes | None:
        """The local user's public key (the root of moderation authority), or None."""
        return self._handle.local_user

    @property
    def verify_signatures(self) -> bool:
        """Whether ingest verifies signatures."""
        return self._ingest.verify_signatures

    @property
    def verify_workers(self) -> int:
        """How many workers verify signatures for ``ingest_many``."""
        return self._ingest.verify_workers

    def close(self) -> None:
        """Wait for calls in flight, then close; later calls raise :class:`StoreClosedError`."""
        if not self._handle.gate.shut():
            return
        self._ingest.close()
        opening.close_db(self._handle.raw_db, self._registered, self._links)

    def _reopen(self) -> None:
        """Close and reopen LevelDB (no call in flight): clears its sticky write error."""
        self._handle.raw_db.close()
        self._handle.replace_db(opening.reopen_db(self.path, self._links, **self._sizes))
        self.writer.forget_caches()  # what was written before the failure is not known; the filters read the old DB

    @property
    def _gate(self) -> Gate:
        return self._handle.gate

    @property
    def closed(self) -> bool:
        """True once :meth:`close` began."""
        return self._handle.gate.closed

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._handle.raw_db.closed else "open"
        return f"<{type(self).__name__} {str(self.path)!r} {state}>"

    @property
    def db(self) -> plyvel.DB:
        """The underlying plyvel database (for tools; use it inside :meth:`in_flight`); raises :class:`StoreClosedError` once closed."""
        return self._handle.db

    def in_flight(self) -> AbstractContextManager[None]:
        """A block ``close()`` waits for, whose plyvel errors become CableErrors.

        >>> with store.in_flight():                     # doctest: +SKIP
        ...     export(store.db, "snap/")
        """
        return self._handle.gate.call(self.path)

    def subscribe(self, callback: Callable[[Committed], None]) -> Callable[[], None]:
        """Call ``callback(Committed)`` after every commit that adds or removes posts.

        Returns a function that unsubscribes.  See :mod:`cablestore.store.events`.
        """
        return self._listeners.subscribe(callback)

    def join_cabal(self, cabal_key: bytes) -> None:
        """Tie the store to the cabal of ``cabal_key`` (a digest is kept, never the key); another cabal's key raises :class:`CabalMismatchError`.

        A private ``serve`` or ``sync`` calls it before any byte is exchanged,
        so two cabals are never mixed in one store.
        """
        cabal.adopt_cabal(self.db, self.writer, cabal_key)

    def cabal_digest(self) -> bytes | None:
        """The digest of the cabal key this store is bound to (:meth:`join_cabal`), or None: a private cabal's store is never served plainly."""
        return cabal.bound_digest(self.db)

    # --- posts in and out (cablestore.store.write.ingest) -------------------------
    validate = _to("_ingest", Ingest.validate)
    ingest = _to("_ingest", Ingest.ingest)
    ingest_many = _to("_ingest", Ingest.ingest_many)
    ingest_batches = _to("_ingest", Ingest.ingest_batches)
    learn_listing = _to("_ingest", Ingest.learn_listing)
    delete = _to("_ingest", Ingest.delete)
    purge_author = _to("_ingest", Ingest.purge_author)

    # --- hash-level reads (cablestore.store.read.hashes, cablestore.store.read.links)
    get = _to("_queries", Queries.get)
    get_many = _to("_queries", Queries.get_many)
    is_deleted = _to("_queries", Queries.is_deleted)
    tombstones = _to("_queries", Queries.tombstones)
    tombstones_made_by = _to("_queries", Queries.tombstones_made_by)
    channel_time_range = _to("_queries", Queries.channel_time_range)
    channel_state = _to("_queries", Queries.channel_state)
    members = _to("_queries", Queries.members)
    topic = _to("_queries", Queries.topic)
    channel_list = _to("_queries", Queries.channel_list)
    listed_spellings = _to("_queries", Queries.listed_spellings)
    name = _to("_queries", Queries.name)
    user_info = _to("_queries", Queries.user_info)
    author_posts = _to("_queries", Queries.author_posts)
    newest_timestamp = _to("_queries", Queries.newest_timestamp)
    local_value = _to("_queries", Queries.local_value)
    links = _to("_queries", Queries.links)
    reverse_links = _to("_queries", Queries.reverse_links)
    heads = _to("_queries", Queries.heads)
    range_sum = _to("_queries", Queries.range_sum)
    range_items = _to("_queries", Queries.range_items)
    __contains__ = _to("_queries", Queries.__contains__)

    # --- decoded reads (cablestore.store.read.decoded, cablestore.store.read.users) ----
    post = _to("_reading", Reading.post)
    messages = _to("_reading", Reading.messages)
    posts = _to("_reading", Reading.posts)
    channels = _to("_reading", Reading.channels)
    channel_post_count = _to("_reading", Reading.channel_post_count)
    stats = _to("_reading", Reading.stats)
    __len__ = _to("_reading", Reading.__len__)

    def __iter__(self) -> Iterator:
        """Iterate over every stored post (see :meth:`posts`)."""
        return self.posts()

    def __bool__(self) -> bool:
        """A store is true even when empty (``len`` counts its posts)."""
        return True
    user_labels = _to("_users", UserQueries.user_labels)
    users = _to("_users", UserQueries.users)
    resolve_user = _to("_users", UserQueries.resolve_user)

    # --- moderation (cablestore.store.read.moderation) --------------------
    set_local_user = _to("_moderation", ModerationQueries.set_local_user)
    seed = _to("_moderation", ModerationQueries.seed)
    set_seed = _to("_moderation", ModerationQueries.set_seed)
    clear_seed = _to("_moderation", ModerationQueries.clear_seed)
    roles_from_seed = _to("_moderation", ModerationQueries.roles_from_seed)
    roles = _to("_moderation", ModerationQueries.roles)
    hidden_users = _to("_moderation", ModerationQueries.hidden_users)
    hidden_posts = _to("_moderation", ModerationQueries.hidden_posts)
    dropped_posts = _to("_moderation", ModerationQueries.dropped_posts)
    dropped_channels = _to("_moderation", ModerationQueries.dropped_channels)
    blocks = _to("_moderation", ModerationQueries.blocks)
    kept_out = _to("_moderation", ModerationQueries.kept_out)
    unblocks = _to("_moderation", ModerationQueries.unblocks)
    blocked_by = _to("_moderation", ModerationQueries.blocked_by)
    moderation_state = _to("_moderation", ModerationQueries.moderation_state)
    moderation_summary = _to("_moderation", ModerationQueries.moderation_summary)
    is_dropped = _to("_moderation", ModerationQueries.is_dropped)
    channel_dropped = _to("_moderation", ModerationQueries.channel_dropped)
    shareable = _to("_moderation", ModerationQueries.shareable)
    moderation_posts = _to("_moderation", ModerationQueries.moderation_posts)

    # --- posts recover found gone (cablestore.store.read.lost) -------------
    lost_posts = _to("_lost", LostPosts.lost_posts)
    remember_lost = _to("_lost", LostPosts.remember_lost)

    # --- search (cablestore.store.search_index.searcher) ---------------------------------
    enable_search = _to("_searching", Searching.enable_search)
    disable_search = _to("_searching", Searching.disable_search)
    search = _to("_searching", Searching.search)

    @property
    def search_enabled(self) -> bool:
        """Whether the store keeps the full-text index (:meth:`search` needs it)."""
        return self._searching.search_enabled

    # --- verification ---------------------------------------------------
    def check(self, fix: bool = False, engine: str = "local", **kw: Any) -> Report:
        """Recompute every derived view and compare; with ``fix``, repair.

        Returns a :class:`cablestore.rebuild.Report` (``report.consistent``).
        A repair writes through the writer's lease (:meth:`Writer.lease`).
        """
        from cablestore.rebuild import check

        if fix:
            self.writer.writable()
        return check(self, fix=fix, engine=engine, **kw)

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

    # --- what a peer reads and writes (cablestore.store.read.peer) -------
    def channel_state_answer(self, channel: str) -> list[bytes]:
        """The hashes answering a Cable channel state request (:func:`cablestore.store.read.peer.channel_state_answer`)."""
        return peer_reads.channel_state_answer(self, channel)

    def time_range_page(self, channel: str, start: int, end: int, below: bytes | None, n: int) -> list[bytes]:
        """Up to ``n`` ``!chat`` keys of a time range, newest first, below ``below`` (:func:`cablestore.store.read.peer.time_range_page`)."""
        return peer_reads.time_range_page(self, channel, start, end, below, n)

    def tombstoned(self, hashes: list[bytes]) -> set[bytes]:
        """The hashes among ``hashes`` with a tombstone (:func:`cablestore.store.read.peer.tombstoned`)."""
        return peer_reads.tombstoned(self, self.writer.maybe_tombstoned(hashes))

    def any_member(self, channel: str, public_keys: Iterable[bytes]) -> bool:
        """One of ``public_keys`` is a member or ex-member of ``channel`` (:func:`cablestore.store.read.peer.any_member`)."""
        return peer_reads.any_member(self, channel, public_keys)

    def check_relayed(self, buf: bytes, now: int) -> bytes:
        """Check a post relayed for a forwarded request; its hash (:func:`cablestore.store.read.peer.check_relayed`)."""
        return peer_reads.check_relayed(self._ingest, buf, now)

    def has_posts(self) -> bool:
        """True if the store holds any post."""
        return peer_reads.has_posts(self)

    def shunned(self, user: bytes) -> frozenset[bytes]:
        """Authors left out of post responses to an authenticated ``user`` (:func:`cablestore.store.read.peer.shunned`)."""
        return peer_reads.shunned(self, bytes(user))

    def known_user(self, public_key: bytes) -> bool:
        """An author of a stored post, a user a block or the moderation seed names (:func:`cablestore.store.read.peer.known_user`)."""
        return peer_reads.known_user(self, bytes(public_key))

    def sync_cursor(self, peer: str, channel: str) -> int | None:
        """The sync cursor of ``channel`` from ``peer`` (ms), or None (:func:`cablestore.store.read.peer.sync_cursor`)."""
        return peer_reads.sync_cursor(self, peer, channel)

    def set_sync_cursor(self, peer: str, channel: str, timestamp: int) -> None:
        """Move the sync cursor forward, through the writer (:func:`cablestore.store.read.peer.set_sync_cursor`)."""
        peer_reads.set_sync_cursor(self.writer, peer, channel, timestamp)


__all__ = ["Store", "IngestResult", "VERIFY_AHEAD", "wall_clock_ms"]
