"""Running the web archive: on its own (``cablestore web STORE``), or inside a serving process.

:func:`run_web` serves one store until stopped (SIGINT/SIGTERM or ``stop``).
A store that ``cablestore serve`` holds is reached through its control
socket: the command runs in the serving process, which starts the archive
in a thread of its own (:class:`WebThread`, its own event loop, so the
peers' loop never waits on a page) and keeps it until serve stops
(:class:`ServedWeb`).  There the archive shows the connected peers and
pushes new posts to open channel pages.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

from cablestore.errors import TransportError
from cablestore.web.app import make_app

if TYPE_CHECKING:
    from cablestore.peer.node import Node
    from cablestore.store.store import Store
    from cablestore.web.follow import Followed

SHUTDOWN_SECONDS = 2.0  # open live streams are cut after this at stop


async def start_site(store: Store | Followed, host: str, port: int, node: Node | None = None) -> tuple[web.AppRunner, int]:
    """Start the archive of ``store`` on ``host:port`` (0: any free port); return its runner and the port bound."""
    runner = web.AppRunner(make_app(store, node=node), access_log=None, shutdown_timeout=SHUTDOWN_SECONDS)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise TransportError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound = runner.addresses[0][1] if runner.addresses else port
    return runner, bound


async def run_web(
    store: Store | Followed, host: str, port: int, *, ready: Callable[[str, int], None] | None = None, stop: asyncio.Event | None = None, node: Node | None = None
) -> None:
    """Serve the archive of ``store`` until ``stop`` is set or SIGINT/SIGTERM; ``ready(host, port)`` once listening.

    ``store``: one this process holds, or a :class:`cablestore.web.follow.Followed` one.
    """
    runner, bound = await start_site(store, host, port, node)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    try:
        if ready is not None:
            ready(host, bound)
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)
        await runner.cleanup()


class WebThread:
    """The archive of ``store`` in a thread with its own event loop: :meth:`start` returns the port, :meth:`stop` ends it."""

    def __init__(self, store: Store, host: str, port: int, node: Node | None = None) -> None:
        self.store, self.host, self.port, self.node = store, host, port, node
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="cablestore-web", daemon=True)

    def start(self) -> int:
        """Start the thread and the archive in it; returns the port bound (a failure to listen raises :class:`TransportError`)."""
        self._thread.start()
        try:
            self._runner, self.port = asyncio.run_coroutine_threadsafe(start_site(self.store, self.host, self.port, self.node), self._loop).result()
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()
            raise
        return self.port

    def stop(self) -> None:
        """End the archive (open live streams are cut after :data:`SHUTDOWN_SECONDS`) and its thread."""
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(SHUTDOWN_SECONDS + 10)
            self._runner = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()


class ServedWeb:
    """The archives one serving process runs on its store, and the peer node they show (use as a context manager)."""

    _by_store: dict[int, ServedWeb] = {}
    _lock = threading.Lock()

    def __init__(self, store: Store) -> None:
        self.store = store
        self.node: Node | None = None
        self._threads: list[tuple[WebThread, str | None]] = []

    def __enter__(self) -> ServedWeb:
        with self._lock:
            ServedWeb._by_store[id(self.store)] = self
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            ServedWeb._by_store.pop(id(self.store), None)
            threads, self._threads = self._threads, []
        for thread, port_file in threads:
            thread.stop()
            if port_file:
                with contextlib.suppress(OSError):
                    os.unlink(port_file)

    def attach(self, node: Node) -> None:
        """The serving node, once it exists (``run_server``'s ``on_node``)."""
        self.node = node

    @classmethod
    def of(cls, store: Store) -> ServedWeb | None:
        """The ServedWeb of a store a serving process holds, or None."""
        with cls._lock:
            return cls._by_store.get(id(store))

    def start(self, host: str, port: int, port_file: str | None = None) -> int:
        """Start one more archive of the served store; returns its port (it stops with serve)."""
        thread = WebThread(self.store, host, port, self.node)
        bound = thread.start()
        with self._lock:
            self._threads.append((thread, port_file))
        return bound
