"""What every component of one open store shares: its path, its LevelDB, its gate and its options.

:class:`cablestore.Store` is a facade over components (the writer, the
readers, moderation, search, the peer's reads); each is handed the one
:class:`Handle` of its store at construction and reads ``handle.db``
whenever it needs the database, because a reopen after an I/O error
(:mod:`cablestore.store.lifecycle.inflight`) replaces it.  Nothing else is shared
between components: what one needs of another it is handed too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cablestore.errors import StoreClosedError
from cablestore.store.lifecycle.inflight import Gate


class Component:
    """A part of one store: it reads ``self.db`` and ``self.path`` from the store's :class:`Handle`."""

    def __init__(self, handle: Handle) -> None:
        self._handle = handle

    @property
    def db(self) -> Any:
        """The store's open plyvel database."""
        return self._handle.db

    @property
    def path(self) -> Path:
        """The store's directory."""
        return self._handle.path


def wall_clock_ms() -> int:
    """Milliseconds since the epoch by the wall clock (the default ``now`` of a store)."""
    return time.time_ns() // 1_000_000


class Handle:
    """One open store: ``path``, ``db`` (plyvel, replaced on a reopen), ``gate``, ``readonly``, ``sync``, ``now``, ``local_user``."""

    def __init__(self, path: Path, db: Any, *, readonly: bool, sync: bool, now: Callable[[], int] | None, gate: Gate) -> None:
        self.path = path
        self._db = db
        self.readonly = readonly
        self.sync = sync
        self.now = now or wall_clock_ms
        self.gate = gate
        self.local_user: bytes | None = None  # the root of moderation authority, once the store has one

    @property
    def db(self) -> Any:
        """The open plyvel database; :class:`StoreClosedError` once closed."""
        if self._db.closed:
            raise StoreClosedError("the store is closed")
        return self._db

    @property
    def raw_db(self) -> Any:
        """The database object even when closed (for closing and reopening it)."""
        return self._db

    def replace_db(self, db: Any) -> None:
        """After a reopen: every component reads the new database from now on."""
        self._db = db


__all__ = ["Component", "Handle", "wall_clock_ms"]
