"""Change notifications: what one committed WriteBatch added and removed.

A peer keeps live requests open (a channel time range with ``time_end = 0``,
a channel state with ``future = 1``) and must push every matching post that
any writer stores later: a remote peer, a local author, ``ingest_many``.
``Store.subscribe(callback)`` calls ``callback(Committed)`` after each
WriteBatch commits, outside the store's write lock, in the writing thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from cablestore.wire.codec import Post

log = logging.getLogger("cablestore.store.events")


@dataclass(frozen=True, slots=True)
class Committed:
    """Posts a commit stored (``added``, in ingest order) and removed (``removed``)."""

    added: tuple[tuple[bytes, Post], ...]
    removed: tuple[bytes, ...]

    def __bool__(self) -> bool:
        return bool(self.added or self.removed)


class Listeners:
    """The callbacks of one Store; a failing callback is logged, never raised into the writer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: list = []

    def subscribe(self, callback: Callable[[Committed], None]) -> Callable[[], None]:
        """Register ``callback(Committed)``; returns a function that unsubscribes it."""
        with self._lock:
            self._callbacks.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)

        return unsubscribe

    def notify(self, change: Committed) -> None:
        """Call every callback with ``change`` (nothing when it adds and removes nothing)."""
        if not change:
            return
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            try:
                callback(change)
            except Exception:  # a listener's bug must not fail an ingest that committed
                log.exception("store listener %r failed", callback)
