"""Recompute every derived view from the primary data to verify or repair a store.

``rebuild(path)`` verifies, ``rebuild(path, repair=True)`` repairs; engines are
``"spark"`` (a PySpark job over an exported Parquet snapshot) and ``"local"``
(the same recomputation in-process).  Both call the view modules in
``cablestore.views``; neither re-implements a view.  ``export`` writes the
snapshot (``rebuild/parquet.py`` describes it); ``migrate`` upgrades a store
of an older keyspace format (``rebuild/migration.py``).
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

from .migration import MigrateReport, migrate
from .snapshot import export, export_store
from .verify import Report, apply_repair, check, verify

if TYPE_CHECKING:
    from cablestore.progress import Progress
    from cablestore.store.store import Store

__all__ = ["MigrateReport", "Report", "apply_repair", "check", "export", "export_store", "migrate", "rebuild", "verify"]


def rebuild(
    store_path: str | os.PathLike | Store | None = None,
    *,
    snapshot: str | os.PathLike | None = None,
    repair: bool = False,
    engine: str = "spark",
    master: str | None = None,
    partitions: int = 16,
    check_signatures: bool = True,
    progress: Progress | None = None,
    spark_log: str | None = None,
    verify_workers: int | None = None,
    ship_env: bool = True,
) -> Report:
    """Verify (or repair) the store at ``store_path``, or verify a snapshot (a directory or URI).

    A store path is opened read-only to verify (nothing in it is written), writable to repair.

    ``master``, ``spark_log`` (where Spark's own output goes) and
    ``ship_env`` (pack this Python environment for the executors of a master
    that is not local; False: they bring their own) apply to the Spark
    engine only; ``verify_workers`` (processes checking signatures; default
    one on a machine with a second core) to the local engine only.
    """
    from cablestore.errors import RebuildError
    from cablestore.store.store import Store

    if engine not in ("spark", "local"):
        raise RebuildError(f"unknown engine {engine!r} (spark or local)")
    if engine == "local" and master is not None:
        raise RebuildError("a Spark master needs the Spark engine (master with engine='local')")
    kw = dict(
        engine=engine,
        partitions=partitions,
        check_signatures=check_signatures,
        master=master,
        progress=progress,
        spark_log=spark_log,
        verify_workers=verify_workers,
        ship_env=ship_env,
    )
    if store_path is None:
        if snapshot is None or repair:
            raise RebuildError("give a store path (repair needs one), or snapshot=DIR to verify a snapshot")
        return verify(snapshot=snapshot, **kw)
    held = isinstance(store_path, Store)  # a store held open (by `serve`, for a control client): left open
    with contextlib.nullcontext(store_path) if held else Store(store_path, create=False, readonly=not repair) as store, store.in_flight():
        if snapshot is not None:
            if repair:
                raise RebuildError("repair=True works on a store path, not on a snapshot")
            return verify(snapshot=snapshot, **kw)
        return check(store, fix=repair, record=repair, **kw)  # a repairing rebuild/check keeps what it found (!local!checked)
