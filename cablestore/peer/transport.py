"""asyncio TCP for :mod:`cablestore.peer`: Cable messages back to back on a socket.

:class:`PeerServer` listens and keeps one :class:`cablestore.peer.protocol.Connection`
per accepted socket; :func:`connect` dials out.  Both share a
:class:`cablestore.peer.protocol.Node`, so requests are forwarded between all of its
connections and live pushes reach every socket.  :func:`serve` and
:func:`sync` are what ``cablestore serve`` / ``cablestore sync`` run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from cablestore.errors import TransportError
from cablestore.peer.protocol import Connection, Node
from cablestore.peer.sync import Sync

if TYPE_CHECKING:
    from cablestore.progress import Progress
    from cablestore.store.store import Store

log = logging.getLogger("cablestore.peer.transport")
READ_SIZE = 256 << 10
TICK_S = 1.0


def now_ms() -> int:
    """Wall-clock milliseconds (the peer's notion of now)."""
    return time.time_ns() // 1_000_000


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) to ``(host, port)``."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise TransportError(f"address must be HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


class Wire:
    """The sockets of one node: flushes every connection's output, ticks its clock."""

    def __init__(self, node: Node):
        self.node = node
        self.loop = asyncio.get_running_loop()
        self.writers: dict[Connection, asyncio.StreamWriter] = {}
        self.on_tick = None  # called after each tick (a sync re-checks its timed-out requests)
        node.on_output = self._wake
        self._ticker = self.loop.create_task(self._tick())

    def _wake(self) -> None:
        """Called by the node from any thread after a live push."""
        with contextlib.suppress(RuntimeError):  # the loop is closing
            self.loop.call_soon_threadsafe(self.flush)

    def flush(self) -> None:
        """Write every connection's pending bytes to its socket."""
        for conn, writer in list(self.writers.items()):
            data = conn.data_to_send()
            if data and not writer.is_closing():
                writer.write(data)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            self.node.tick(now_ms())
            if self.on_tick is not None:
                self.on_tick()
            self.flush()

    async def run(
        self, conn: Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, on_data: Callable[[], None] | None = None
    ) -> None:
        """Pump one socket until it closes (or the connection breaks on a framing error)."""
        self.writers[conn] = writer
        try:
            self.flush()
            await writer.drain()
            while not conn.closed:
                data = await reader.read(READ_SIZE)
                if not data:
                    break
                conn.receive_data(data, now_ms())
                if on_data is not None:
                    on_data()
                self.flush()
                await writer.drain()
        except (ConnectionError, OSError) as exc:
            log.info("%s: connection lost: %s", conn.name, exc)
        finally:
            conn.close()
            self.writers.pop(conn, None)
            self.flush()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def close(self) -> None:
        """Stop ticking and close every socket."""
        self._ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._ticker
        for writer in list(self.writers.values()):
            writer.close()
        self.node.on_output = None


class PeerServer:
    """Accepts Cable peers on ``host:port`` (port 0: any free port, see ``.port``)."""

    def __init__(self, node: Node, host: str, port: int):
        self.node, self.host, self.port = node, host, port
        self.wire: Wire | None = None
        self._server = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> PeerServer:
        """Listen; raises :class:`TransportError` if the address cannot be bound."""
        self.wire = Wire(self.node)
        try:
            self._server = await asyncio.start_server(self._accept, self.host, self.port)
        except OSError as exc:
            await self.wire.close()
            raise TransportError(f"cannot listen on {self.host}:{self.port}: {exc}") from exc
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _accept(self, reader, writer) -> None:
        peer = writer.get_extra_info("peername")
        conn = self.node.connect(f"{peer[0]}:{peer[1]}" if peer else "peer")
        task = asyncio.current_task()
        self._tasks.add(task)
        try:
            await self.wire.run(conn, reader, writer)
        finally:
            self._tasks.discard(task)

    async def dial(self, host: str, port: int, name: str | None = None) -> Connection:
        """Connect this node to another peer too (its requests get forwarded there)."""
        reader, writer = await open_connection(host, port)
        conn = self.node.connect(name or f"{host}:{port}")
        task = asyncio.create_task(self.wire.run(conn, reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return conn

    async def close(self) -> None:
        """Stop listening and drop every connection."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        await self.wire.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def open_connection(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """``asyncio.open_connection`` with refusals as :class:`TransportError`."""
    try:
        return await asyncio.open_connection(host, port)
    except OSError as exc:
        raise TransportError(f"cannot connect to {host}:{port}: {exc}") from exc


async def sync_path(path: str | os.PathLike, address: str, **kw: Any) -> dict:
    """:func:`run_sync` into the store at ``path``, created if missing, once ``address`` has answered.

    The connection is made first, so a peer that cannot be reached (or a bad
    address) leaves no new, empty store behind.
    """
    from cablestore.store.store import Store

    streams = await open_connection(*parse_address(address))
    try:
        store = Store(path)
    except BaseException:
        streams[1].close()
        raise
    with store:
        return await run_sync(store, address, streams=streams, **kw)


async def run_server(
    store: Store, address: str, *, ready: Callable[[str, int], None] | None = None, stop: asyncio.Event | None = None
) -> dict:
    """Serve ``store`` until ``stop`` is set or SIGINT/SIGTERM; return counts."""
    host, port = parse_address(address)
    node = Node(store)
    server = await PeerServer(node, host, port).start()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready(server.host, server.port)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)
        await server.close()
        node.close()
    return {"listen": f"{server.host}:{server.port}"}


async def run_sync(
    store: Store,
    address: str,
    *,
    channels: Iterable[str] | None = None,
    live: bool = False,
    window: tuple[int, int] | None = None,
    progress: Progress | None = None,
    timeout: float = 600.0,
    stop: asyncio.Event | None = None,
    streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None,
) -> dict:
    """Sync ``store`` from the peer at ``address``; return the sync summary.

    Returns once every request concluded (with ``live``: when ``stop`` is set,
    on SIGINT/SIGTERM, or when the peer hangs up).  ``timeout`` bounds the
    whole finite sync in seconds.  ``streams``: a connection to ``address``
    already open (see :func:`sync_path`).
    """
    reader, writer = streams or await open_connection(*parse_address(address))
    node = Node(store)
    wire = Wire(node)
    conn = node.connect(address)
    sync = Sync(conn, address, channels=channels, live=live, window=window)
    finished = asyncio.Event()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    if live:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(sig, stop.set)

    def step() -> None:
        sync.poll(now_ms())
        if progress is not None:
            progress.count = conn.stats["ingested"]
            progress.advance(0)
        if sync.done and not live:
            finished.set()

    wire.on_tick = step
    pump = asyncio.create_task(wire.run(conn, reader, writer, on_data=step))
    step()
    wire.flush()
    waiters = [asyncio.create_task(finished.wait()), asyncio.create_task(stop.wait()), pump]
    try:
        done, _ = await asyncio.wait(waiters, timeout=None if live else timeout, return_when=asyncio.FIRST_COMPLETED)
        if not done:
            raise TransportError(f"sync from {address} did not finish within {timeout:.0f} s")
    finally:
        summary = sync.summary()
        sync.abandon()
        for task in waiters:
            task.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        await wire.close()
        node.close()
        if live:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.remove_signal_handler(sig)
    if conn.error is not None:
        raise TransportError(f"{address} broke the framing: {conn.error}")
    return summary
