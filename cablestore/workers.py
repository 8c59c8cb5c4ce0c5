"""Worker processes that never import the program's main script.

``multiprocessing`` (and so ``ProcessPoolExecutor``) starts a spawned worker
by importing the parent's ``__main__`` module: a script that opens a store
with ``verify_workers=2`` but has no ``if __name__ == "__main__":`` guard
runs again in every worker (a second open of the store, a second ingest, a
reset line run twice).  A :class:`WorkerPool` starts plain interpreters on
:func:`serve` instead (``python -c``, with the parent's ``sys.path``); they
import ``cablestore`` and the functions they are handed, never ``__main__``.

It offers the two calls :func:`cablestore.wire.crypto.verify_many` and the
store use of an executor: ``map(fn, items)`` (``fn`` a module-level function,
sent by reference; results in order, computed while the caller works) and
``shutdown()``.  A dead worker makes the iteration raise
``BrokenProcessPool``, as an executor's does.  Workers ignore Ctrl-C (the
terminal sends it to them too): the parent decides, and a worker exits when
its input closes (the parent closed the pool, or died).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import pickle
import queue
import selectors
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from cablestore.errors import ArgumentError

_HEADER = struct.Struct(">Q")  # every message: its length, then a pickle
_ENTRY = "import sys, json; sys.path[:] = json.loads(sys.argv[1]); from cablestore.workers import serve; serve()"


def _frame(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


def serve() -> None:
    """A worker's loop: read ``(task, fn, item)``, answer ``(task, ok, fn(item) or the exception)``, until the input closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not corrupt the answers
    try:
        while header := inp.read(_HEADER.size):
            task, fn, item = pickle.loads(inp.read(_HEADER.unpack(header)[0]))
            try:
                answer = (task, True, fn(item))
            except Exception as exc:  # the parent raises it where the result is consumed
                answer = (task, False, exc)
            try:
                frame = _frame(answer)
            except Exception as exc:  # an unpicklable result or exception
                frame = _frame((task, False, RuntimeError(f"worker could not send its answer: {exc!r}")))
            out.write(frame)
            out.flush()
    except (BrokenPipeError, EOFError, struct.error):  # the parent went away
        pass


class _Worker:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _ENTRY, json.dumps(sys.path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True
        )
        self.fd = self.proc.stdout.fileno()
        self.buffer = bytearray()

    def messages(self, data: bytes) -> list[Any]:
        """Append bytes read from the worker; return the complete answers they end."""
        self.buffer += data
        out = []
        while len(self.buffer) >= _HEADER.size:
            (n,) = _HEADER.unpack_from(self.buffer)
            if len(self.buffer) < _HEADER.size + n:
                break
            out.append(pickle.loads(bytes(self.buffer[_HEADER.size : _HEADER.size + n])))
            del self.buffer[: _HEADER.size + n]
        return out


class WorkerPool:
    """``workers`` processes running :func:`serve`, started at the first :meth:`map`."""

    def __init__(self, workers: int) -> None:
        if not isinstance(workers, int) or workers < 1:
            raise ArgumentError(f"a pool needs at least one worker, got {workers!r}")
        self.workers = workers
        self._procs: list[_Worker] = []
        self._tasks = itertools.count()
        self._results: dict[int, tuple[bool, Any]] = {}
        self._abandoned: set[int] = set()
        self._outbox: queue.Queue = queue.Queue()
        self._feeder: threading.Thread | None = None
        self._read_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._broken = False
        self._closed = False

    def _start(self) -> None:
        if self._closed:
            raise RuntimeError("the pool is shut down")
        if self._broken:
            raise BrokenProcessPool("a worker process died")
        if not self._procs:
            self._procs = [_Worker() for _ in range(self.workers)]
            self._feeder = threading.Thread(target=self._feed, name="cablestore-workers-feed", daemon=True)
            self._feeder.start()

    def _feed(self) -> None:
        """Write queued tasks to their workers (a thread: a full pipe blocks it, not the caller)."""
        while (job := self._outbox.get()) is not None:
            worker, frame = job
            try:
                worker.proc.stdin.write(frame)
                worker.proc.stdin.flush()
            except (OSError, ValueError):  # the worker died, or the pool is closing
                self._broken = True

    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        """``fn(item)`` for every item, computed in the workers; the results in order.

        The work is queued at once; the returned iterator waits for each
        result in turn and raises ``BrokenProcessPool`` if a worker died.
        """
        with self._state_lock:
            self._start()
            tasks = []
            for item in items:
                task = next(self._tasks)
                self._outbox.put((self._procs[task % self.workers], _frame((task, fn, item))))
                tasks.append(task)
        return self._collect(tasks)

    def _collect(self, tasks: list[int]) -> Iterator[Any]:
        done = 0
        try:
            for task in tasks:
                ok, value = self._wait(task)
                done += 1
                if not ok:
                    raise value
                yield value
        finally:  # abandoned: the answers still to come are dropped as they arrive
            with self._read_lock:
                for task in tasks[done:]:
                    if self._results.pop(task, None) is None:
                        self._abandoned.add(task)

    def _wait(self, task: int) -> tuple[bool, Any]:
        """Read whatever any worker has answered until ``task`` is answered (never one pipe alone: see _feed)."""
        with self._read_lock:
            with selectors.DefaultSelector() as sel:
                for w in self._procs:
                    sel.register(w.fd, selectors.EVENT_READ, w)
                while task not in self._results:
                    for key, _ in sel.select():
                        data = os.read(key.fd, 1 << 16)
                        if not data:
                            self._broken = True
                            raise BrokenProcessPool("a worker process died")
                        for t, ok, value in key.data.messages(data):
                            if t in self._abandoned:
                                self._abandoned.discard(t)
                            else:
                                self._results[t] = (ok, value)
            return self._results.pop(task)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the workers (queued work is dropped); ``wait`` and ``cancel_futures`` as ``Executor.shutdown`` takes them."""
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
            procs, self._procs = self._procs, []
        if not procs:
            return
        with contextlib.suppress(queue.Empty):
            while True:
                self._outbox.get_nowait()
        self._outbox.put(None)
        for w in procs:  # a worker blocked on an answer nobody reads gets EPIPE and ends
            with contextlib.suppress(OSError):
                w.proc.stdout.close()
        if self._feeder is not None:
            self._feeder.join(timeout=10 if wait else 0.1)
            if self._feeder.is_alive():  # a worker hung mid-read: end it so the feeder's write fails
                for w in procs:
                    w.proc.kill()
                self._feeder.join()
        for w in procs:  # end of input: a worker exits
            with contextlib.suppress(OSError, ValueError):
                w.proc.stdin.close()
            try:
                w.proc.wait(timeout=10 if wait else 0.1)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()


__all__ = ["WorkerPool", "serve"]
