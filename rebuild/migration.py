"""Migration of a store to the current keyspace format (``cablestore-1`` or ``cablestore-2`` to ``cablestore-3``): a reindex between two writes.

The formats differ only in their derived rows; the primary data (``!post!``,
``!deleted!``, ``!facts!``) and the rows no view derives (``!meta!``,
``!local!``, ``!quarantine!``, ``!refused!``) are the same.  So a migration
is a reindex (:func:`cablestore.rebuild.reindex.reindex_db`: every key
outside the primary prefixes dropped, every view rebuilt by the current
code) between two writes:

1. ``!local!migrating`` is written, synced: a migration has begun.
2. The reindex rewrites every derived row (its batches synced).
3. One synced WriteBatch sets ``!meta!format`` to the current format and
   deletes ``!local!migrating``.

Killed anywhere before step 3, the store still says its old format: every
open refuses it (:class:`cablestore.errors.MigrationNeededError`), and
migrating again starts the reindex over and finishes (the reindex is a
function of the primary data, so the result is the same store).  After
step 3 it is in the current format; migrating it again changes nothing.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cablestore.keyspace.keys import FORMAT_KEY, MIGRATING
from cablestore.rebuild.reindex import reindex_db
from cablestore.store import arguments
from cablestore.store.lifecycle import opening
from cablestore.store.write.writer import Lease

if TYPE_CHECKING:
    from cablestore.progress import Progress


@dataclass
class MigrateReport:
    """What :func:`migrate` did: the formats, the reindex's counts, the seconds it took."""

    path: str
    from_format: str
    to_format: str
    migrated: bool  # False: the store was in the current format already, and nothing was written
    resumed: bool = False  # a migration interrupted before had left its marker
    posts: int = 0
    indexed: int = 0
    written: int = 0  # derived rows written
    dropped: int = 0  # rows of the old format removed
    faults: list = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        """The report as JSON-ready data (what ``cablestore migrate --json`` prints)."""
        return {
            "path": self.path,
            "from_format": self.from_format,
            "to_format": self.to_format,
            "migrated": self.migrated,
            "resumed": self.resumed,
            "posts": self.posts,
            "indexed": self.indexed,
            "written": self.written,
            "dropped": self.dropped,
            "faults": [{"kind": f.kind, "hash": f.hash.hex(), "detail": f.detail} for f in self.faults],
            "seconds": round(self.seconds, 3),
        }


def migrate(path: str | os.PathLike, progress: Progress | None = None) -> MigrateReport:
    """Upgrade the store at ``path`` to the current format (``Store.migrate``, ``cablestore migrate``).

    The store is opened exclusively (another holder raises
    :class:`cablestore.errors.StoreLockedError`); a store in the current
    format is left as it is (``report.migrated`` is False).  Faulty primary
    records the reindex finds are left in place, as a reindex leaves them
    (``report.faults``; ``cablestore check STORE --repair`` sets them aside).
    """
    path = arguments.store_path(path)
    start = time.perf_counter()
    db, key, links = opening.open_db(path, create=False, migrating=True)
    with contextlib.ExitStack() as closing:
        closing.callback(opening.close_db, db, key, links)
        closing.enter_context(opening.translated(path))
        stored = db.get(FORMAT_KEY)
        report = MigrateReport(str(path), stored.decode(), opening.FORMAT.decode(), migrated=stored != opening.FORMAT)
        if not report.migrated:
            return report
        report.resumed = db.get(MIGRATING) is not None
        lease = Lease(db, sync=True)  # no Store has the directory open: the migration holds it alone
        lease.put(MIGRATING, b"")
        if progress:
            progress.stage(f"migrate {report.from_format} to {report.to_format}")
        done = reindex_db(lease, progress, sync=True)
        with lease.write_batch() as wb:  # the flip, last: until it is written the store is in its old format
            wb.put(FORMAT_KEY, opening.FORMAT)
            wb.delete(MIGRATING)
        report.posts, report.indexed, report.written, report.dropped, report.faults = done.posts, done.indexed, done.written, done.dropped, done.faults
    report.seconds = time.perf_counter() - start
    return report

