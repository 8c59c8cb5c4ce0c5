"""The store behind the archive's pages: the one a serving process holds, or a store followed without its lock.

``cablestore web STORE`` on a store no process serves must leave the store
to its writers: ``post``, ``ingest`` and ``serve`` open it while the archive
runs.  :class:`Followed` therefore never opens the store itself: it opens a
read-only copy of one consistent state of its files
(:func:`cablestore.store.lifecycle.readonly.copy_state`: hard links, no
lock), and when a page is asked at least :data:`CHECK_EVERY` seconds after
the last look and the store's files changed, it opens a copy of the new
state for the pages from then on.  A page reads one state from its first
read to its last (:meth:`Followed.lease`); a state no page reads any more is
closed and its copy removed.  :class:`Held` is the same interface over a
store this process holds (``serve``'s, or a test's).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from cablestore.errors import CableError, StoreIOError
from cablestore.store.lifecycle import opening, readonly
from cablestore.web.names import Labels

if TYPE_CHECKING:
    from cablestore.store.store import Store

log = logging.getLogger("cablestore.web")

CHECK_EVERY = 1.0  # seconds between looks at a followed store's files (a page asked sooner reads the state it has)


class Held:
    """A store this process holds: every page reads it, with one cache of labels."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.labels = Labels(store)

    @contextlib.contextmanager
    def lease(self) -> Iterator[tuple[Store, Labels]]:
        """The store and its labels, for one page."""
        yield self.store, self.labels

    def close(self) -> None:
        """Stop caching labels (the store stays open: its holder closes it)."""
        self.labels.close()


class _State:
    """One opened copy of a followed store's files, and how many pages read it."""

    def __init__(self, path: Path, directory: Path, state: tuple | None) -> None:
        from cablestore.store.store import Store

        self.path, self.directory, self.state = path, directory, state
        try:
            self.store = Store(directory, readonly=True)
        except CableError as exc:
            raise self.in_words(exc) from exc
        # The copy is removed on close, or at the interpreter's exit without one (a killed process leaves
        # cablestore-web-* in TMPDIR: links and copies, safe to delete).
        self._removal = weakref.finalize(self, shutil.rmtree, directory, ignore_errors=True)
        self.labels = Labels(self.store)
        self.readers = 0
        self.retired = False  # a newer state replaced it: closed once no page reads it
        self.closed = False

    def in_words(self, error: CableError) -> CableError:
        """``error`` naming the followed store instead of the directory of its copy."""
        text = str(error).replace(os.fspath(self.directory), os.fspath(self.path))
        return error if text == str(error) else type(error)(text)

    def close(self) -> None:
        try:
            self.labels.close()
            self.store.close()
        finally:
            self._removal()


class Followed:
    """The store at ``path``, read through copies of its states without its lock (see the module's docstring); :meth:`close` after."""

    def __init__(self, path: str | os.PathLike, *, check_every: float = CHECK_EVERY, link: bool = True) -> None:
        self.path = Path(path)
        self.check_every, self._link = check_every, link
        refused = opening.refusal(self.path, opening.classify(self.path), create=False)
        if refused is not None:
            raise refused
        self._lock = threading.Lock()  # guards _current and every state's readers
        self._renewing = threading.Lock()  # one copy made at a time
        self._current = self._open(None)
        self._checked = time.monotonic()
        self._closed = False

    @property
    def store(self) -> Store:
        """The store of the newest state opened (for a quick look; pages use :meth:`lease`)."""
        return self._current.store

    @contextlib.contextmanager
    def lease(self) -> Iterator[tuple[Store, Labels]]:
        """The newest state's store and labels, kept open until the block ends; the store's files looked at first if it is time."""
        if time.monotonic() - self._checked >= self.check_every:
            self.refresh()
        with self._lock:
            current = self._current
            current.readers += 1
        try:
            yield current.store, current.labels
        except CableError as exc:
            raise current.in_words(exc) from exc
        finally:
            self._release(current)

    def refresh(self) -> bool:
        """Open the store's newest state if its files changed since the state open now; True if it did.

        A copy another thread is making meanwhile is not waited for.  A
        state that cannot be read (a writer midway, a damage) is logged and
        the pages keep the state they have.
        """
        if not self._renewing.acquire(blocking=False):
            return False
        try:
            self._checked = time.monotonic()
            if self._closed or readonly.state(self.path) in (self._current.state, None):
                return False
            try:
                fresh = self._open(self._current.directory)
            except CableError as exc:
                log.warning("the web archive keeps showing an earlier state of %s: %s", self.path, exc)
                return False
            with self._lock:
                old, self._current = self._current, fresh
                old.retired = True
            self._release(old, leased=False)
            return True
        finally:
            self._renewing.release()

    def _open(self, previous: Path | None) -> _State:
        try:
            directory = Path(tempfile.mkdtemp(prefix="cablestore-web-"))
        except OSError as exc:
            raise StoreIOError(f"cannot make a temporary directory to read {self.path} without locking it: {exc.strerror or exc} (set TMPDIR)") from exc
        try:
            copied = readonly.copy_state(self.path, directory, reuse=previous, link=self._link)
            return _State(self.path, directory, copied)
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise

    def _release(self, state: _State, *, leased: bool = True) -> None:
        with self._lock:
            if leased:
                state.readers -= 1
            done = state.retired and state.readers == 0 and not state.closed
            state.closed = state.closed or done
        if done:
            state.close()

    def close(self) -> None:
        """Close the state open now (one a page still reads is closed when it ends); again: nothing."""
        with self._renewing, self._lock:
            self._closed = True
            current = self._current
            current.retired = True
        self._release(current, leased=False)
