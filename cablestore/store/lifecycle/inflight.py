"""Calls in flight on a Store, so ``close()`` never pulls LevelDB from under one.

plyvel frees the database on ``close()`` while other threads may be inside
a ``get`` or an iterator: that segfaults.  Every public Store method passes
through a :class:`Gate`; ``close()`` shuts the gate to new calls, waits for
the calls inside to finish, and only then closes LevelDB.  The same wrapper
turns plyvel's exceptions into :class:`cablestore.errors.CableError` ones,
and after an I/O error (a full disk) reopens LevelDB before the next call,
so the store works again once space is freed.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import plyvel

from cablestore.errors import StoreClosedError
from cablestore.store.lifecycle.opening import translate

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


class Gate:
    """A count of calls in flight that ``close`` waits to reach zero."""

    def __init__(self, reopen: Callable[[], None] | None = None) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._count = 0
        self._closed = False
        self._local = threading.local()  # this thread's nesting depth
        self._reopen = reopen  # called with no call in flight, after an I/O error
        self.needs_reopen = False
        self._pausing = False
        self._waiters = 0  # threads in shut() or a reopen, waiting for the count to fall

    @property
    def closed(self) -> bool:
        """True once :meth:`shut` began."""
        return self._closed

    def _depth(self) -> int:
        return getattr(self._local, "depth", 0)

    def enter(self) -> None:
        """Admit a call; StoreClosedError once closing began (nested calls still pass)."""
        local = self._local
        depth = getattr(local, "depth", 0)
        with self._cond:
            if depth == 0 and (self._pausing or self._closed or self.needs_reopen):
                self._admit_slowly()
            self._count += 1
        local.depth = depth + 1

    def _admit_slowly(self) -> None:
        """A top-level call while closing, reopening, or after an I/O error (condition held)."""
        while self._pausing:
            self._cond.wait()
        if self._closed:
            raise StoreClosedError("the store is closed")
        if self.needs_reopen and self._reopen is not None:
            self._pausing = True
            self._waiters += 1
            try:
                while self._count:
                    self._cond.wait()
                self._reopen()  # raises (a CableError) if the cause persists; the next call tries again
                self.needs_reopen = False
            finally:
                self._waiters -= 1
                self._pausing = False
                self._cond.notify_all()

    def leave(self) -> None:
        """Count a call out (the one :meth:`enter` admitted)."""
        local = self._local
        local.depth -= 1
        with self._cond:
            self._count -= 1
            if self._waiters:
                self._cond.notify_all()

    def shut(self) -> bool:
        """Refuse new calls and wait for those in flight; False if already shut.

        Calls this thread is itself inside (a listener closing the store) are
        not waited for: they end with StoreClosedError at their next LevelDB use.
        """
        mine = self._depth()
        with self._cond:
            if self._closed:
                return False
            self._closed = True
            self._waiters += 1
            try:
                while self._count > mine:
                    self._cond.wait()
            finally:
                self._waiters -= 1
                self._cond.notify_all()  # a top-level call waiting out a reopen sees the close
        return True

    @contextmanager
    def call(self, path: str | os.PathLike) -> Iterator[None]:
        """The body of one guarded call: admitted, errors translated, counted out."""
        self.enter()
        try:
            yield
        except BaseException as exc:
            new = self.failure(exc, path)
            if new is exc:
                raise
            raise new from exc
        finally:
            self.leave()

    def failure(self, exc: BaseException, path: str | os.PathLike) -> BaseException:
        """The exception a guarded call raises for ``exc`` (plyvel's become CableErrors)."""
        if isinstance(exc, plyvel.IOError):
            # LevelDB refuses every later write after some failed writes (a
            # full disk) until it is reopened: the next call reopens it.
            self.needs_reopen = True
        if isinstance(exc, plyvel.Error):
            new = translate(exc, path)
        elif isinstance(exc, RuntimeError) and "closed" in str(exc):  # plyvel's closed DB or iterator
            new = StoreClosedError("the store is closed")
        else:
            return exc
        new.__cause__ = exc
        return new


def guarded(method: F) -> F:
    """Run a Store method inside the store's gate (see :class:`Gate`): what :func:`guard_public_methods` does to each.

    A generator method's every step runs inside the gate instead: it may be
    resumed long after the call that made it.
    """
    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def steps(self, *args, **kwargs):
            return guarded_iter(self, method(self, *args, **kwargs))

        steps.__guarded__ = True
        return steps

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        gate = self._gate
        gate.enter()  # (not ``with gate.call()``: this is every query's hot path)
        try:
            return method(self, *args, **kwargs)
        except BaseException as exc:
            new = gate.failure(exc, self.path)
            if new is exc:
                raise
            raise new from exc
        finally:
            gate.leave()

    wrapper.__guarded__ = True
    return wrapper


# Store methods that never touch LevelDB (or manage the gate themselves; ``migrate``: a static method, of a path, not of this store).
UNGUARDED = frozenset({"close", "subscribe", "validate", "in_flight", "migrate"})
GUARDED_SPECIAL = frozenset({"__len__", "__contains__", "__iter__"})


def guard_public_methods(cls: type) -> type:
    """Class decorator: make every public method of ``cls`` (and its bases) ``@guarded``.

    The one guard mechanism of ``Store``: methods mixed in by other modules
    (link queries, say) are covered without each remembering a decorator.
    """
    for name in dir(cls):
        if (name.startswith("_") and name not in GUARDED_SPECIAL) or name in UNGUARDED:
            continue
        # Wrapped where it is defined (Store's own methods, most of them delegations to its components).
        owner = next(k for k in cls.__mro__ if name in vars(k))
        attr = vars(owner)[name]
        if owner is not object and inspect.isfunction(attr) and not getattr(attr, "__guarded__", False):
            setattr(owner, name, guarded(attr))
    return cls


def guarded_iter(store: Any, iterator: Iterator[T]) -> Iterator[T]:
    """Yield from a plyvel iterator, each step inside the store's gate."""
    while True:
        with store._gate.call(store.path):
            try:
                item = next(iterator)
            except StopIteration:
                return
        yield item
