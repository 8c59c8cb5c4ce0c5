"""The one door of every write to an open store.

Every mutation of a :class:`cablestore.Store` passes here, in one order:

1. **writable**: a store opened ``readonly=True`` raises
   :class:`cablestore.errors.ReadOnlyStoreError` before anything happens;
2. **lock**: one writer at a time (the store's write lock);
3. **one batch**: an :class:`cablestore.store.write.batch.IndexState` over a
   :class:`cablestore.store.write.txn.Txn` that buffers every write;
4. **commit**: :func:`cablestore.store.write.indexer.commit` settles the latest
   groups, resolves the moderation state the batch changed (removing what it
   keeps out) and writes one LevelDB WriteBatch;
5. **notify**: subscribers (:meth:`cablestore.Store.subscribe`) hear what was
   added and removed, outside the lock.

:meth:`Writer.batch` is that door.  Bulk jobs that rewrite whole views (the
search index's build, a repair, a reindex) write more than one WriteBatch
can hold; they take :meth:`Writer.lease`: the same writable check and lock,
then the job writes bounded WriteBatches through the :class:`Lease`, and
the writer forgets what it cached of the views when the lease ends.  A
lease changes no post, so it notifies nothing.  ``tests/test_architecture.py``
checks that nothing else in the library writes to LevelDB.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cablestore.errors import ReadOnlyStoreError
from cablestore.store.events import Listeners
from cablestore.store.handle import Handle
from cablestore.store.write import indexer
from cablestore.store.write.batch import IndexState
from cablestore.store.write.hashfilter import link_filter, tombstone_filter
from cablestore.store.write.txn import Txn


class Lease:
    """Exclusive write access to a store's LevelDB for a bulk job: bounded WriteBatches, point writes.

    Made by :meth:`Writer.lease` for an open store, or directly for a
    LevelDB directory no Store has open (a migration).
    """

    def __init__(self, db: Any, sync: bool) -> None:
        self.db = db
        self.sync = sync

    def write_batch(self, *, sync: bool | None = None, transaction: bool = False) -> Any:
        """A new plyvel WriteBatch (use it as a context manager, or call ``write()``)."""
        return self.db.write_batch(sync=self.sync if sync is None else sync, transaction=transaction)

    def put(self, key: bytes, value: bytes, *, sync: bool | None = None) -> None:
        """Write one key at once (outside any batch)."""
        self.db.put(key, value, sync=self.sync if sync is None else sync)

    def delete(self, key: bytes, *, sync: bool | None = None) -> None:
        """Delete one key at once (outside any batch)."""
        self.db.delete(key, sync=self.sync if sync is None else sync)

    def write(self, pairs: list[tuple[bytes, bytes | None]], *, sync: bool | None = None) -> int:
        """Write ``(key, value)`` pairs (None deletes) in one WriteBatch; returns how many."""
        with self.write_batch(sync=sync) as wb:
            for key, value in pairs:
                if value is None:
                    wb.delete(key)
                else:
                    wb.put(key, value)
        return len(pairs)


class Writer:
    """The write door of one store: writable check, lock, one batch, ``indexer.commit``, notify.

    It also keeps what the store caches between batches for its writes: the
    tombstone and link filters (:mod:`cablestore.store.write.hashfilter`) and the
    winners of latest groups (:mod:`cablestore.store.write.batch`).
    """

    def __init__(self, handle: Handle, listeners: Listeners, *, search: bool = False) -> None:
        self._handle = handle
        self.listeners = listeners
        self.lock = threading.Lock()
        self.search = search  # the store keeps the search view (views/search.py) in every batch
        self._tomb_filter = self._link_filter = None  # made on the first write
        self._winners: dict = {}  # latest candidate per group, as committed
        self._sum_rows: dict = {}  # !recon rows as committed (views/recon.py): read once, not once a batch

    # --- the door ---------------------------------------------------------
    def writable(self) -> None:
        """Raise :class:`ReadOnlyStoreError` if the store was opened with ``readonly=True``."""
        if self._handle.readonly:
            raise ReadOnlyStoreError(f"{self._handle.path} is open read-only (readonly=True): it cannot be written")

    @contextmanager
    def batch(self, *, sync: bool | None = None, resolve: bool = False) -> Iterator[IndexState]:
        """The one door: yields a batch to fill under the write lock; on a clean exit commits it and notifies.

        An exception inside the block writes nothing.  ``resolve``: resolve
        the whole moderation state at commit even when no moderation post
        changed (a new local user).  ``sync`` overrides the store's option.
        """
        self.writable()
        handle = self._handle
        with self.lock:
            state = self._new_state()
            yield state
            indexer.commit(state, handle.local_user, handle.sync if sync is None else sync, resolve=resolve)
        self.listeners.notify(state.committed())

    @contextmanager
    def lease(self) -> Iterator[Lease]:
        """Exclusive write access for a bulk job (writable check, write lock); the view caches are forgotten after it."""
        self.writable()
        with self.lock:
            try:
                yield Lease(self._handle.db, self._handle.sync)
            finally:
                self.forget_caches()

    @contextmanager
    def locked(self) -> Iterator[None]:
        """The write lock alone, for a read that must see no write interleave (a check that does not repair)."""
        with self.lock:
            yield

    def _new_state(self) -> IndexState:
        db = self._handle.db
        if self._tomb_filter is None:
            self._tomb_filter, self._link_filter = tombstone_filter(db), link_filter(db)
        self._tomb_filter.grow_if_full()
        self._link_filter.grow_if_full()
        return IndexState(Txn(db), self._tomb_filter, self._winners, link_filter=self._link_filter, search=self.search, sum_rows=self._sum_rows)

    def maybe_tombstoned(self, hashes: list[bytes]) -> list[bytes]:
        """The hashes a tombstone may name, by the writer's filter (all of them before its first write made one):
        a listed hash with none costs no seek (30-40 µs at 1M posts)."""
        with self.lock:
            tombs = self._tomb_filter
            return list(hashes) if tombs is None else [h for h in hashes if tombs.might_have(h)]

    def forget_caches(self) -> None:
        """Drop what the writer remembers of the views: after writes not made by its batches (a lease, a reopen)."""
        self._winners.clear()
        self._sum_rows.clear()
        self._tomb_filter = self._link_filter = None

    # --- small writes of the store's own keys -------------------------------
    def put_local(self, key: bytes, value: bytes, *, sync: bool | None = None, only_if_greater: bool = False) -> bool:
        """Write one ``!local!`` key through the door; ``only_if_greater`` keeps a value that only moves forward.

        Returns True if it wrote.
        """
        with self.batch(sync=sync) as state:
            old = state.get(key)
            if only_if_greater and old is not None and int.from_bytes(value, "big") <= int.from_bytes(old, "big"):
                return False
            if old == value:
                return False
            state.put(key, value)
        return True


__all__ = ["Writer", "Lease"]
