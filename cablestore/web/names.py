"""Authors' labels for the pages, cached until a commit could change a name.

``Store.user_labels`` reads every user's name to tell shared names apart
(a scan of the user view: about half a channel page's time at 1M posts and
200 users).  :class:`Labels` keeps what it answered and forgets it all when a
commit of the store adds a post/info or removes any post (either can change
who is called what); a store opened read-only never commits, so its labels
are read once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from cablestore.store.events import Committed
from cablestore.wire.codec import INFO

if TYPE_CHECKING:
    from cablestore.store.store import Store

MAX_KEPT = 100_000  # labels kept at most; past that the cache starts again


class Labels:
    """``labels(public_keys)`` -> {key: label}, as ``store.user_labels`` answers, cached (call :meth:`close` after)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._kept: dict[bytes, str] = {}
        self._generation = 0
        self._unsubscribe = store.subscribe(self._on_commit)

    def close(self) -> None:
        """Stop following the store's commits."""
        self._unsubscribe()

    def _on_commit(self, change: Committed) -> None:
        if change.removed or any(post.post_type == INFO for _, post in change.added):
            with self._lock:
                self._kept.clear()
                self._generation += 1

    def __call__(self, public_keys: Iterable[bytes]) -> dict[bytes, str]:
        wanted = set(public_keys)
        with self._lock:
            found = {pk: self._kept[pk] for pk in wanted if pk in self._kept}
            generation = self._generation
        missing = wanted - found.keys()
        if missing:
            read = self.store.user_labels(missing)
            found.update(read)
            with self._lock:
                if generation == self._generation:  # no name changed while we read
                    if len(self._kept) + len(read) > MAX_KEPT:
                        self._kept.clear()
                    self._kept.update(read)
        return found
