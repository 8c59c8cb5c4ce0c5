"""A write transaction: buffered writes that commit as one LevelDB WriteBatch.

Reads see the transaction's own writes first, so later posts in an
``ingest_many`` batch see earlier ones.  A ``Txn`` only buffers: what the
indexing of a batch knows beyond its writes (the latest groups it touched,
the posts it added and removed, the moderation it must resolve) is a
:class:`cablestore.store.write.batch.IndexState`, and the order "index, resolve
the moderation state, write" is driven by :func:`cablestore.store.write.indexer.commit`.
"""

from __future__ import annotations

from bisect import bisect_left

from cablestore.compiled import native as _native
from cablestore.keyspace.keys import next_prefix

_MISSING = object()


class Txn:
    def __init__(self, db):
        self.db = db
        # One iterator, re-seeked for every scan: creating one per scan cost
        # more than the scan.  It reads the DB as of now, which is right: the
        # DB does not change until commit.
        self._it = None
        self.writes: dict[bytes, bytes | None] = {}
        self._sorted_writes: list[bytes] = []  # the keys of ``writes``, sorted, while their count is unchanged

    # --- point reads and writes ----------------------------------------
    def get(self, key: bytes) -> bytes | None:
        value = self.writes.get(key, _MISSING)
        return self.db.get(key) if value is _MISSING else value

    def put(self, key: bytes, value: bytes) -> None:
        self.writes[key] = value

    def put_many(self, pairs) -> None:
        """``put`` each ``(key, value)`` pair."""
        self.writes.update(pairs)

    def delete(self, key: bytes) -> None:
        self.writes[key] = None

    # --- scans through the shared iterator ----------------------------
    def _iter(self):
        if self._it is None:
            self._it = self.db.iterator()
        return self._it

    def current(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """``(key, value)`` pairs under ``prefix`` as this txn would commit them, in key order."""
        found = dict(self.scan(prefix))
        writes = self.writes
        for key in self._written_under(prefix):
            value = writes[key]
            if value is None:
                found.pop(key, None)
            else:
                found[key] = value
        return sorted(found.items())

    def _written_under(self, prefix: bytes) -> list[bytes]:
        """Keys of this txn's writes under ``prefix``: a bisect in the sorted keys, not a pass over every write.

        Keys are only ever added to ``writes`` (a delete writes None), so the
        sorted list is current while their count is unchanged.
        """
        keys = self._sorted_writes
        if len(keys) != len(self.writes):
            keys = self._sorted_writes = sorted(self.writes)
        out = []
        for i in range(bisect_left(keys, prefix), len(keys)):
            if not keys[i].startswith(prefix):
                break
            out.append(keys[i])
        return out

    def scan(self, prefix: bytes):
        """``(key, value)`` pairs of the DB under ``prefix`` (not this txn's writes)."""
        it = self._iter()
        it.seek(prefix)
        out = []
        for key, value in it:
            if not key.startswith(prefix):
                break
            out.append((key, value))
        return out

    def last_candidate(self, prefix: bytes, skip=frozenset()) -> bytes | None:
        """The greatest DB key under ``prefix`` whose last 32 bytes (a post hash) are not in ``skip``."""
        it = self._iter()
        it.seek(next_prefix(prefix))
        while True:
            try:
                key, _ = it.prev()
            except StopIteration:
                return None
            if not key.startswith(prefix):
                return None
            if key[-32:] not in skip:
                return key

    # --- commit ---------------------------------------------------------
    def commit(self, sync: bool = False) -> None:
        """Write every buffered write in one WriteBatch."""
        if self._it is not None:
            self._it.close()
            self._it = None
        if self.writes:
            # In key order: LevelDB inserts a sorted batch into its memtable faster
            # than the sort costs (2.3 µs a post less at 100k posts, docs/performance.md).
            # The keys alone sort in half the time of (key, value) pairs.
            writes = self.writes
            keys = self._sorted_writes if len(self._sorted_writes) == len(writes) else sorted(writes)
            with self.db.write_batch(sync=sync) as wb:
                if _native is not None:  # the same loop, compiled (cablestore.compiled)
                    _native.write_sorted(wb.put, wb.delete, keys, writes)
                else:
                    for key in keys:
                        value = writes[key]
                        if value is None:
                            wb.delete(key)
                        else:
                            wb.put(key, value)
