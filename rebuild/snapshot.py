"""What the engines read: a live store (:class:`StoreSource`) or a Parquet snapshot (:class:`SnapshotSource`).

A Spark job cannot open a live LevelDB from many executors, so
:func:`export` (``rebuild/exporter.py``) writes a consistent LevelDB snapshot
as a Parquet dataset on storage a cluster reads (``rebuild/parquet.py``
describes the files).  Both sources give the same three streams: the posts
``(hash, blob)``, the tombstones ``("t", target, by, record)`` and the
derived entries ``(key, value)``.  The in-process engine reads a snapshot
here, through pyarrow's filesystems; the Spark engine reads the same files
through Spark (``rebuild/spark_engine.py``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from cablestore.keyspace.keys import DELETED, POSTS, SEARCH_KEY
from cablestore.store.write.resolving import held_facts, stored_seed

from .exporter import export, manifest_facts, manifest_search, manifest_seed
from .parquet import files_of, filesystem, load_manifest, read_file, rows
from .recompute import PRIMARY_PREFIXES

if TYPE_CHECKING:
    from cablestore.progress import Progress
    from cablestore.store.store import Store

__all__ = ["SnapshotSource", "StoreSource", "export", "export_store", "load_manifest", "primary_count"]


def export_store(store: Store, location: str | os.PathLike, partitions: int = 16, progress: Progress | None = None, **kw: Any) -> dict[str, Any]:
    """:func:`export` of an open :class:`cablestore.Store`, drawing ``progress`` (a :class:`cablestore.progress.Progress`) with a total.

    ``kw``: :func:`export`'s keywords (``decoded``, ``workers``, ``source``).
    """
    with store.in_flight():
        stage = None if progress is None else progress.stage("export posts and tombstones", primary_count(store.db, progress))
        return export(store.db, location, partitions, stage, **kw)


def primary_count(db, progress: Progress | None) -> int | None:
    """How many posts and tombstones ``db`` holds, for a progress bar's total; None (not counted) when no bar is drawn."""
    if progress is None or not progress.enabled:
        return None
    return sum(1 for p in (POSTS, DELETED) for _ in db.iterator(prefix=p, include_value=False))


class StoreSource:
    """Reads primary and derived data straight from a LevelDB snapshot."""

    def __init__(self, db):
        self._snap = db.snapshot()

    def posts(self):
        """``(hash, blob)`` of every stored post."""
        n = len(POSTS)
        for key, value in self._snap.iterator(prefix=POSTS, verify_checksums=True):
            yield key[n:], value

    def facts(self) -> list:
        """``(hash, fact)`` of the store's facts (``cablestore.keyspace.facts``) that decide the moderation state."""
        return held_facts(lambda prefix: list(self._snap.iterator(prefix=prefix, verify_checksums=True)))

    def seed(self):
        """The store's moderation seed (``cablestore.store.write.resolving.stored_seed``)."""
        return stored_seed(self._snap.get)

    def search(self) -> bool:
        """Whether the store keeps the search view (``!meta!search``)."""
        return self._snap.get(SEARCH_KEY) is not None

    def tombstones(self):
        """``("t", target, by, value)`` of every tombstone."""
        for key, value in self._snap.iterator(prefix=DELETED, verify_checksums=True):
            rest = key[len(DELETED) :]
            yield ("t", rest[:32], rest[32:], value)

    def live(self):
        """Every derived entry: the key ranges between the primary prefixes (posts are not read)."""
        start = None
        for prefix in sorted(PRIMARY_PREFIXES):  # damaged tables fail loudly (verify_checksums)
            yield from self._snap.iterator(start=start, stop=prefix, verify_checksums=True)
            start = prefix[:-1] + bytes([prefix[-1] + 1])
        yield from self._snap.iterator(start=start, verify_checksums=True)

    def close(self):
        self._snap.close()


class SnapshotSource:
    """Reads a Parquet snapshot (a local path or a URI pyarrow reaches) with the interface of StoreSource.

    Each file is read whole (an export bounds them), checked against the
    manifest's sha256, then decoded; a damaged file raises RebuildError
    before any of its rows is used.
    """

    def __init__(self, location: str | os.PathLike):
        self.location = location
        self.fs, self.root = filesystem(location)
        self.manifest = load_manifest(location)
        self.partitions = self.manifest["partitions"]

    def local_user(self) -> bytes | None:
        """The store's local user, as the export recorded it (None: none was set)."""
        found = self.manifest.get("local_user")
        return bytes.fromhex(found) if found else None

    def facts(self) -> list:
        """``(hash, fact)`` of the facts the export recorded (``cablestore.keyspace.facts``)."""
        return manifest_facts(self.manifest)

    def seed(self):
        """The moderation seed the export recorded."""
        return manifest_seed(self.manifest)

    def search(self) -> bool:
        """Whether the exported store kept the search view (its ``!meta!search``, in the manifest's store meta)."""
        return manifest_search(self.manifest)

    def _rows(self, table: str):
        for name, info in files_of(self.manifest, table):
            yield from rows(read_file(self.fs, self.root, name), name, info)

    def posts(self):
        """``(hash, blob)`` of every post, partition by partition."""
        return self._rows("posts")

    def tombstones(self):
        """``("t", target, by, record)`` of every tombstone."""
        for target, by, record in self._rows("tombstones"):
            yield ("t", target, by, record)

    def live(self):
        """Every derived entry the store held when it was exported."""
        return self._rows("live")

    def close(self):
        pass

