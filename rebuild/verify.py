"""Verify a store against the recomputation, and repair it.

``check(store_path, fix=False)`` is the one call: it recomputes every derived
view from the primary data, compares digests per view and bucket, lists the
exact keys that differ, and with ``fix=True`` writes the difference back in
one WriteBatch and verifies again.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgpack

from cablestore.errors import RebuildError
from cablestore.keyspace.keys import CHECKED, LOCAL_USER_KEY, POSTS, QUARANTINE, REINDEXING
from cablestore.store.write.writer import Lease

from . import local
from .recompute import FAULT_KINDS, REMOVE, REPAIR_ACTION, VIEW_NAMES, Fault, view_of
from .snapshot import SnapshotSource, StoreSource, export, primary_count

if TYPE_CHECKING:
    from cablestore.progress import Progress
    from cablestore.store.store import Store


@dataclass
class Report:
    engine: str
    posts: int
    tombstones: int
    partitions: int
    faults: list
    missing: dict = field(default_factory=dict)  # key -> recomputed value
    extra: dict = field(default_factory=dict)  # key -> live value
    different: dict = field(default_factory=dict)  # key -> (live, recomputed)
    live_counts: dict = field(default_factory=dict)
    recomputed_counts: dict = field(default_factory=dict)
    differing_buckets: int = 0
    seconds: dict = field(default_factory=dict)
    repaired: dict | None = None
    before: dict | None = None  # the first verify's report, after a repair
    reindex_interrupted: bool = False  # a reindex of the store was interrupted (!local!reindexing): its views are partly built

    @property
    def consistent(self) -> bool:
        """True when there are no faults and no missing, extra or different view entries."""
        return not (self.faults or self.missing or self.extra or self.different)

    def to_dict(self, examples: int = 5) -> dict[str, Any]:
        """The report as JSON-ready data, with up to ``examples`` keys of each kind per view."""
        views = {}
        for name in VIEW_NAMES:
            per = {kind: sorted(k for k in getattr(self, kind) if view_of(k) == name) for kind in ("missing", "extra", "different")}
            if not any(per.values()) and name not in self.live_counts and name not in self.recomputed_counts:
                continue
            views[name] = {
                "live": self.live_counts.get(name, 0),
                "recomputed": self.recomputed_counts.get(name, 0),
                **{kind: len(keys) for kind, keys in per.items()},
                "examples": {kind: [k.hex() for k in keys[:examples]] for kind, keys in per.items() if keys},
            }
        faults = defaultdict(list)
        for f in self.faults:
            faults[f.kind].append({"hash": f.hash.hex(), "detail": f.detail})
        return {
            "consistent": self.consistent,
            "engine": self.engine,
            "posts": self.posts,
            "tombstones": self.tombstones,
            "partitions": self.partitions,
            "differing_buckets": self.differing_buckets,
            "faults": {kind: faults.get(kind, []) for kind in FAULT_KINDS},
            "views": views,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "repaired": self.repaired,
            "before": self.before,
            "reindex_interrupted": self.reindex_interrupted,
        }


def compare(result, seconds=None) -> Report:
    wanted = result.differing_buckets()
    recomputed, live = result.fetch(wanted) if wanted else ({}, {})
    report = Report(
        engine=result.engine,
        posts=result.posts,
        tombstones=result.tombstones,
        partitions=result.partitions,
        faults=sorted(result.faults, key=Fault.sort_key),
        live_counts=result.live_counts,
        recomputed_counts=result.recomputed_counts,
        differing_buckets=len(wanted),
        seconds=dict(seconds or {}),
    )
    for key, value in recomputed.items():
        if key not in live:
            report.missing[key] = value
        elif live[key] != value:
            report.different[key] = (live[key], value)
    report.extra = {k: v for k, v in live.items() if k not in recomputed}
    return report


def run_engine(
    engine: str, *, db=None, snapshot=None, partitions=16, check_signatures=True, master=None, progress=None, spark_log=None, verify_workers=None, ship_env=True
):
    """Recompute with ``engine`` from a plyvel DB or a snapshot (a directory or URI).

    ``verify_workers``: processes the local engine checks signatures in
    (default: one when the machine has a second core; 0: in this process).
    ``ship_env``: on a Spark master that is not local, ship this Python
    environment to the executors (``rebuild/shipenv.py``).
    """
    if not isinstance(partitions, int) or not 1 <= partitions <= 256:  # a bucket is a hash byte
        raise RebuildError(f"partitions must be an integer from 1 to 256, got {partitions!r}")
    local_user = db.get(LOCAL_USER_KEY) if db is not None else None
    if engine == "local":
        if db is not None and progress is not None and progress.enabled:  # a bar needs a total; count only then
            progress.total = sum(1 for _ in db.iterator(prefix=POSTS, include_value=False))
        source = SnapshotSource(snapshot) if snapshot else StoreSource(db)
        try:
            parts = source.partitions if snapshot else partitions
            if local_user is None and snapshot:
                local_user = source.local_user()
            return local.run(source, parts, check_signatures, progress, verify_workers, local_user=local_user)
        finally:
            source.close()
    from . import spark_engine

    session = spark_engine.session(master, log=spark_log, ship_env=ship_env)  # an unreachable master fails before a long export
    if snapshot:
        return spark_engine.run(snapshot, check_signatures, spark=session, progress=progress)
    with tempfile.TemporaryDirectory(prefix="cablestore-snapshot-") as tmp:
        stage = None if progress is None else progress.stage("export posts and tombstones for Spark", primary_count(db, progress))
        export(db, tmp, partitions, stage)
        return spark_engine.run(tmp, check_signatures, spark=session, progress=progress, local_user=local_user)


def verify(
    engine: str = "local",
    *,
    db: Any = None,
    snapshot: str | os.PathLike | None = None,
    partitions: int = 16,
    check_signatures: bool = True,
    master: str | None = None,
    progress: Progress | None = None,
    spark_log: str | None = None,
    verify_workers: int | None = None,
    ship_env: bool = True,
) -> Report:
    """Recompute every view from ``db`` (a plyvel DB) or a ``snapshot`` (directory or URI) and compare; change nothing."""
    start = time.perf_counter()
    if progress and engine == "local":  # the Spark engine draws its export and its tasks (rebuild/spark_engine.py)
        progress.stage(f"recompute views ({engine} engine)")
    result = run_engine(
        engine,
        db=db,
        snapshot=snapshot,
        partitions=partitions,
        check_signatures=check_signatures,
        master=master,
        progress=progress,
        spark_log=spark_log,
        verify_workers=verify_workers,
        ship_env=ship_env,
    )
    recomputed_at = time.perf_counter()
    if progress:
        progress.stage("compare with live views")
    report = compare(result)
    report.reindex_interrupted = db is not None and db.get(REINDEXING) is not None
    if progress:
        progress.done()
    report.seconds = {"recompute": recomputed_at - start, "compare": time.perf_counter() - recomputed_at}
    return report


def apply_repair(lease: Lease, report: Report, sync: bool = True, views: bool = True) -> dict[str, Any]:
    """Make the derived views equal to the recomputation, in one WriteBatch.

    A post its author's stored post/delete provably deleted is removed.
    Every other faulty record (a damaged, mis-keyed or badly signed post, a
    post only an unbacked tombstone calls deleted, a damaged or contradicted
    tombstone) is moved under ``!quarantine!``: nothing reads it there, and
    ``cablestore`` never deletes what it cannot prove wrong.
    """
    removed = quarantined = 0
    db = lease.db
    with lease.write_batch(sync=sync, transaction=True) as wb:  # an interrupt writes nothing
        for fault in {f.key or POSTS + f.hash: f for f in report.faults}.values():
            key = fault.key or POSTS + fault.hash
            if REPAIR_ACTION[fault.kind] == REMOVE:
                removed += 1
            else:
                value = db.get(key)
                if value is None:
                    continue
                wb.put(QUARANTINE + key, value)
                quarantined += 1
            wb.delete(key)
        for key in report.extra if views else ():
            wb.delete(key)
        for key, value in report.missing.items() if views else ():
            wb.put(key, value)
        for key, (_, value) in report.different.items() if views else ():
            wb.put(key, value)
    if not views:
        return {"removed_records": removed, "quarantined": quarantined}
    return {
        "removed_records": removed,
        "quarantined": quarantined,
        "deleted": len(report.extra),
        "written": len(report.missing) + len(report.different),
    }


REINDEX_WHEN_MISSING = 0.5


def mostly_missing(report: Report) -> bool:
    """True when more than half of the recomputed entries are missing from the store.

    A repair then rebuilds every view with :func:`cablestore.rebuild.reindex.reindex`
    (sorted writes, no per-key diff held in a WriteBatch) instead of writing
    the differences: it is faster, and the differences are most of the views.
    """
    return len(report.missing) > REINDEX_WHEN_MISSING * max(sum(report.recomputed_counts.values()), 1)


def check(store: Store, fix: bool = False, engine: str = "local", record: bool = False, **kw: Any) -> Report:
    """Verify ``store`` (a :class:`cablestore.Store`); with ``fix``, repair and verify again.

    ``record`` (with ``fix``): keep what was found under ``!local!checked``
    (:func:`last_check`), as ``cablestore check --repair`` does; a repair inside
    another command (``recover``) records nothing.

    The store's write lock is held throughout, so no ingest interleaves; a
    repair writes through the writer's lease (the writer forgets its view
    caches after it: a store held open by `serve` goes on ingesting).
    """
    if not fix:
        with store.writer.locked():
            return verify(engine, db=store.db, **kw)  # a plain check writes nothing, not even that it ran
    with store.writer.lease() as lease:
        report = verify(engine, db=lease.db, **kw)
        if report.consistent:
            if record:
                _record_check(lease, report, report)
            return report
        if mostly_missing(report):
            from cablestore.rebuild.reindex import reindex_db

            repaired = apply_repair(lease, report, views=False)
            done = reindex_db(lease, sync=store.sync)
            repaired.update(deleted=done.dropped, written=done.written, reindexed=True)
        else:
            repaired = apply_repair(lease, report)
            lease.delete(REINDEXING)  # the views are whole again: an interrupted reindex is finished
        after = verify(engine, db=lease.db, **kw)
        after.repaired = repaired
        after.seconds = {**{f"first_{k}": v for k, v in report.seconds.items()}, **after.seconds}
        after.before = report.to_dict()
        if record:
            _record_check(lease, report, after)
        return after


def _record_check(lease: Lease, found: Report, after: Report) -> None:
    """Keep what a repairing check found under ``!local!checked`` (a plain check is read-only and records nothing)."""
    problems = len(found.faults) + len(found.missing) + len(found.extra) + len(found.different)
    record = {"at": int(time.time() * 1000), "engine": after.engine, "posts": after.posts,
              "faults": problems, "repaired": after.repaired is not None, "consistent": after.consistent}
    lease.put(CHECKED, msgpack.packb(record))


def last_check(store: Store) -> dict[str, Any] | None:
    """What the last ``check --repair`` of ``store`` recorded (``at``: unix ms, ``engine``, ``posts``,
    ``faults`` found, ``repaired``, ``consistent`` after), or None: never, or a record too damaged to read."""
    raw = store.db.get(CHECKED)
    if raw is None:
        return None
    try:
        record = msgpack.unpackb(raw)
    except (ValueError, msgpack.UnpackException):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("at"), int) else None
