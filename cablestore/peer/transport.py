"""asyncio TCP for :mod:`cablestore.peer`: Cable messages back to back on a socket.

:class:`PeerServer` listens and keeps one :class:`cablestore.peer.protocol.Connection`
per accepted socket; :meth:`PeerServer.dial` dials out.  All share one
:class:`cablestore.peer.protocol.Node`, so requests are forwarded between
its connections and live pushes reach every socket.  :func:`run_server`
and :func:`sync_path` are what ``cablestore serve`` / ``cablestore sync`` run.

The transport follows the node's resource policy
(:class:`cablestore.peer.limits.PeerLimits`): each socket is read into a
buffer only as far as :meth:`cablestore.peer.protocol.Connection.read_allowance`
allows (``asyncio.BufferedProtocol``), and paused otherwise; output is
handed to a socket only while its write buffer is below 64 KiB; the node's
work runs in slices of about 5 ms between reads (round robin over the
connections), and only the connections that have bytes to write are
visited.  Nothing is done per event for every connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from cablestore.errors import TooManyConnectionsError, TransportError
from cablestore.peer.limits import DEFAULT_POLICY, PeerLimits
from cablestore.peer.protocol import Connection, Node
from cablestore.peer.pulling import Puller
from cablestore.peer.sync import DEFAULT_PROGRESS_TIMEOUT, Sync

if TYPE_CHECKING:
    from cablestore.progress import Progress
    from cablestore.store.store import Store

log = logging.getLogger("cablestore.peer.transport")
WRITE_CHUNK = 64 << 10  # handed to a socket at once; also its write buffer's high-water mark
PUMP_SECONDS = 0.005  # work between two looks at the sockets
BACKLOG = 512
TCP_CLOSE, TCP_CLOSE_WAIT = 7, 8  # tcpi_state values (Linux)
ABORTED = {"slow", "stalled", "idle", "overflow", "framing", "left"}  # reasons a socket is reset, its unsent bytes dropped


def now_ms() -> int:
    """Wall-clock milliseconds (the peer's notion of now)."""
    return time.time_ns() // 1_000_000


def parse_address(text: str, *, listening: bool = False) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) to ``(host, port)``; port 0 only when ``listening``."""
    host, sep, port = str(text).rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise TransportError(f"address must be HOST:PORT, got {text!r}")
    number = int(port)
    lowest = 0 if listening else 1
    if not lowest <= number <= 65535:
        raise TransportError(f"port must be {lowest}-65535, got {number} (in {text!r})")
    return host.strip("[]"), number


class _Link(asyncio.BufferedProtocol):
    """One socket of a :class:`Wire`: reads what its connection allows, writes what it has."""

    def __init__(self, wire: Wire | None = None, accept: bool = False):
        self.wire = wire
        self.accept = accept
        self.conn: Connection | None = None
        self.transport: asyncio.Transport | None = None
        self.paused = False
        self.eof = False
        self.lost = asyncio.get_running_loop().create_future()

    # asyncio callbacks
    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(high=WRITE_CHUNK, low=WRITE_CHUNK // 4)
        if not self.accept:
            self._pause()  # a dialled socket is read once a connection is attached
            return
        peer = transport.get_extra_info("peername")
        try:
            conn = self.wire.node.connect(f"{peer[0]}:{peer[1]}" if peer else "peer", now=now_ms(), accepted=True)
        except TooManyConnectionsError as exc:
            log.info("refused a connection: %s", exc)
            transport.abort()
            return
        self.wire.attach(self, conn)
        if self.wire.on_accept is not None:
            self.wire.on_accept(conn)
            self.wire.kick()

    def get_buffer(self, sizehint: int) -> memoryview:
        n = self.conn.read_allowance() if self.conn is not None else 0
        return self.wire.view[: max(1, n)] if self.wire is not None else memoryview(bytearray(1))

    def buffer_updated(self, nbytes: int) -> None:
        if self.conn is None or self.conn.closed:
            return
        self.conn.feed(bytes(self.wire.view[:nbytes]), now_ms())
        self.update_reading()
        self.wire.kick()

    def eof_received(self) -> bool:
        self.eof = True
        if self.wire is not None:
            self.wire.kick()
        return True  # keep writing the answers to what it sent; closed once they are out

    def connection_lost(self, exc) -> None:
        if self.conn is not None and not self.conn.closed:
            self.conn.close("lost" if exc else "closed")
        if self.wire is not None:
            self.wire.links.pop(self.conn, None)
            self.wire.paused.pop(self, None)
            self.wire.pool_paused.pop(self, None)
            self.wire.kick()
        if not self.lost.done():
            self.lost.set_result(None)

    def pause_writing(self) -> None:
        if self.conn is not None:
            self.conn.set_writable(False)

    def resume_writing(self) -> None:
        if self.conn is not None:
            self.conn.set_writable(True)
            self.write()

    # driving
    def _pause(self) -> None:
        if not self.paused:
            self.paused = True
            self.transport.pause_reading()
            if self.wire is not None:
                self.wire.paused[self] = None

    def _resume(self) -> None:
        self.paused = False
        self.transport.resume_reading()
        if self.wire is not None:
            self.wire.paused.pop(self, None)

    def gone(self) -> bool:
        """A socket not being read: has the peer left?  (A paused socket sees no EOF; the kernel's TCP state says.)

        Reset by the peer: gone.  Closed by the peer (its FIN) with nothing
        whole left to handle: gone too, as what it sent can never complete.
        """
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        if sock is None or self.transport.is_closing() or not hasattr(socket, "TCP_INFO"):
            return False
        try:
            state = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
        except OSError:
            return True
        if state == TCP_CLOSE:
            return True
        return state == TCP_CLOSE_WAIT and self.conn is not None and not self.conn.runnable and not self.conn.inbox.ready

    def update_reading(self) -> None:
        """Pause reading while the connection may not take more; resume when it may."""
        if self.conn is None or self.transport is None or self.transport.is_closing():
            return
        if self.conn.read_allowance() > 0:
            if self.paused:
                self._resume()
        else:
            self._pause()
            if self.wire.node.pool_left <= 0:
                self.wire.pool_paused[self] = None

    def write(self) -> None:
        """Hand the socket what it takes now; close a half-closed peer once its answers are out."""
        conn, transport = self.conn, self.transport
        if conn is None or transport is None or transport.is_closing():
            return
        while conn.writable and conn.output_buffered:
            transport.write(conn.data_to_send(WRITE_CHUNK))
        if self.eof and not conn.runnable and not conn.output_buffered and not conn.inbox.ready:
            transport.close()
        elif self.wire.node.has_work:
            self.wire.kick()


class Wire:
    """The sockets of one node: reads by the policy, runs the node's work in slices, writes, ticks its clock."""

    def __init__(self, node: Node):
        self.node = node
        self.loop = asyncio.get_running_loop()
        self.links: dict[Connection, _Link] = {}
        self.pool_paused: dict[_Link, None] = {}
        self.paused: dict[_Link, None] = {}  # sockets not being read
        self.view = memoryview(bytearray(node.policy.read_chunk))
        self.on_event: Callable[[], None] | None = None  # after each slice of work, tick or lost socket (a sync re-checks)
        self.on_accept: Callable[[Connection], None] | None = None  # a peer connected (serve starts pulling from it)
        self._kicked = False
        self._closing = False
        node.on_output = self._wake
        node.on_close = self._closed
        policy = node.policy
        shortest = min(policy.frame_timeout, policy.stall_timeout, policy.idle_timeout, node.timeout) or 1000
        self.tick_seconds = min(1.0, max(0.05, shortest / 4000))
        self._ticker = self.loop.create_task(self._tick())

    def attach(self, link: _Link, conn: Connection) -> None:
        """Pair a socket with its connection and start reading it."""
        link.wire, link.conn = self, conn
        self.links[conn] = link
        link.update_reading()
        link.write()

    def _wake(self) -> None:
        """Called by the node from any thread after a live push."""
        with contextlib.suppress(RuntimeError):  # the loop is closing
            self.loop.call_soon_threadsafe(self.kick, True)

    def _closed(self, conn: Connection) -> None:
        """The node closed ``conn`` (a limit, a timeout, a framing error): close its socket."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._drop, conn)

    def _drop(self, conn: Connection) -> None:
        link = self.links.pop(conn, None)
        self.pool_paused.pop(link, None)
        self.paused.pop(link, None)
        if link is not None and link.transport is not None and not link.transport.is_closing():
            if conn.close_reason in ABORTED:
                link.transport.abort()
            else:
                link.transport.close()

    def kick(self, flush: bool = False) -> None:
        """Make sure the work and the writes run soon."""
        if not self._kicked and not self._closing:
            self._kicked = True
            self.loop.call_soon(self._pump)

    def _pump(self) -> None:
        self._kicked = False
        node = self.node
        deadline = time.perf_counter() + PUMP_SECONDS
        now = now_ms()
        while node.has_work:
            node.run(now, 1)
            if time.perf_counter() >= deadline:
                break
        if self.on_event is not None:
            self.on_event()  # a sync may ask more: written below
        self.flush()
        for conn in node.take_touched():
            link = self.links.get(conn)
            if link is not None:
                link.update_reading()
        if self.pool_paused and node.pool_left > 0:
            for link in list(self.pool_paused):
                del self.pool_paused[link]
                link.update_reading()
        if node.has_work:
            self.kick()

    def flush(self) -> None:
        """Write the pending bytes of the connections that have some."""
        for conn in self.node.take_dirty():
            link = self.links.get(conn)
            if link is not None:
                link.write()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.tick_seconds)
            self.node.tick(now_ms())
            for link in [link for link in self.paused if link.gone()]:  # free the slots of peers that left
                link.conn.close("left")
            self.kick()

    async def close(self) -> None:
        """Stop ticking and close every socket."""
        self._closing = True
        self._ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._ticker
        links = list(self.links.values())
        for link in links:
            if link.transport is not None:
                link.transport.close()
        if links:
            await asyncio.wait([link.lost for link in links], timeout=5)
        self.node.on_output = None
        self.node.on_close = None


class PeerServer:
    """Accepts Cable peers on ``host:port`` (port 0: any free port, see ``.port``)."""

    def __init__(self, node: Node, host: str, port: int):
        self.node, self.host, self.port = node, host, port
        self.wire: Wire | None = None
        self._server = None

    async def start(self) -> PeerServer:
        """Listen; raises :class:`TransportError` if the address cannot be bound."""
        self.wire = Wire(self.node)
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(lambda: _Link(self.wire, accept=True), self.host, self.port, backlog=BACKLOG)
        except (OSError, OverflowError, ValueError) as exc:
            await self.wire.close()
            raise TransportError(f"cannot listen on {self.host}:{self.port}: {exc}") from exc
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def dial(self, host: str, port: int, name: str | None = None) -> Connection:
        """Connect this node to another peer too (its requests get forwarded there)."""
        link = await dial(host, port)
        conn = self.node.connect(name or f"{host}:{port}", now=now_ms())
        self.wire.attach(link, conn)
        return conn

    async def close(self) -> None:
        """Stop listening and drop every connection."""
        if self._server is not None:
            self._server.close()
        await self.wire.close()
        if self._server is not None:
            await self._server.wait_closed()


async def dial(host: str, port: int) -> _Link:
    """Open a TCP connection (not read from until attached to a :class:`Wire`); refusals are :class:`TransportError`."""
    loop = asyncio.get_running_loop()
    try:
        _, link = await loop.create_connection(_Link, host, port)
    except (OSError, OverflowError, ValueError) as exc:
        raise TransportError(f"cannot connect to {host}:{port}: {exc}") from exc
    return link


async def sync_path(path: str | os.PathLike, address: str, **kw: Any) -> dict:
    """:func:`run_sync` into the store at ``path``, created if missing, once ``address`` has answered.

    ``local_user=``: the store's local user (see :class:`cablestore.Store`).

    The connection is made first, so a peer that cannot be reached (or a bad
    address) leaves no new, empty store behind.
    """
    from cablestore.store.store import Store

    local_user = kw.pop("local_user", None)
    link = await dial(*parse_address(address))
    try:
        store = Store(path, local_user=local_user)
    except BaseException:
        link.transport.abort()
        raise
    with store:
        return await run_sync(store, address, link=link, **kw)


def _on_signals(loop, stop: asyncio.Event, install: bool) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            if install:
                loop.add_signal_handler(sig, stop.set)
            else:
                loop.remove_signal_handler(sig)


async def run_server(
    store: Store,
    address: str,
    *,
    ready: Callable[[str, int], None] | None = None,
    stop: asyncio.Event | None = None,
    policy: PeerLimits = DEFAULT_POLICY,
    pull: bool = True,
) -> dict:
    """Serve ``store`` until ``stop`` is set or SIGINT/SIGTERM; return the address and the node's counts.

    ``pull``: also sync from every peer that connects (:class:`cablestore.peer.pulling.Puller`):
    its channels and ours, the moderation state, then live, so what it writes reaches the store
    and the other peers' live requests.  False: only answer.
    """
    host, port = parse_address(address, listening=True)
    node = Node(store, policy=policy)
    server = await PeerServer(node, host, port).start()
    puller = None
    if pull:
        puller = Puller(node)
        server.wire.on_accept = lambda conn: puller.accept(conn, now_ms())
        server.wire.on_event = lambda: puller.poll(now_ms())
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    _on_signals(loop, stop, True)
    try:
        if ready is not None:
            ready(server.host, server.port)
        await stop.wait()
    finally:
        _on_signals(loop, stop, False)
        if puller is not None:
            puller.close()
            server.wire.flush()
        await server.close()
        node.close()
    return {"listen": f"{server.host}:{server.port}", **node.snapshot()}


async def run_sync(
    store: Store,
    address: str,
    *,
    channels: Iterable[str] | None = None,
    live: bool = False,
    window: tuple[int, int] | None = None,
    progress: Progress | None = None,
    timeout: float = 600.0,
    progress_timeout: float = DEFAULT_PROGRESS_TIMEOUT / 1000,
    duration: float | None = None,
    stop: asyncio.Event | None = None,
    policy: PeerLimits = DEFAULT_POLICY,
    link: _Link | None = None,
) -> dict:
    """Sync ``store`` from the peer at ``address``; return the sync summary (see :meth:`cablestore.peer.sync.Sync.summary`).

    A finite sync returns once every request concluded, or with a
    ``reason`` when the peer fails it: nothing useful for
    ``progress_timeout`` seconds, the whole sync longer than ``timeout``
    seconds, or the peer closing, breaking the framing, answering wrongly or
    listing more than the memory budget holds.  With ``live``: until ``stop``
    is set, SIGINT/SIGTERM, ``duration`` seconds, or such a failure.
    ``link``: a connection to ``address`` already open (see :func:`sync_path`).
    """
    if link is None:
        link = await dial(*parse_address(address))
    node = Node(store, policy=policy)
    wire = Wire(node)
    conn = node.connect(address, now=now_ms())
    sync = Sync(conn, address, channels=channels, live=live, window=window, progress_timeout=int(progress_timeout * 1000))
    finished = asyncio.Event()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    if live:
        _on_signals(loop, stop, True)
    timer = loop.call_later(duration, stop.set) if live and duration else None

    def step() -> None:
        sync.poll(now_ms())
        if progress is not None:
            progress.count = conn.stats["ingested"]
            progress.advance(0)
        if sync.reason is not None or conn.closed or (sync.done and not live):
            finished.set()

    started = loop.time()
    wire.on_event = step
    wire.tick_seconds = min(wire.tick_seconds, max(0.05, progress_timeout / 4))
    wire.attach(link, conn)
    step()
    wire.flush()
    waiters = [asyncio.create_task(finished.wait()), asyncio.create_task(stop.wait())]
    try:
        done, _ = await asyncio.wait(waiters, timeout=None if live else timeout, return_when=asyncio.FIRST_COMPLETED)
        if not done:
            sync.abandon(f"did not finish within {timeout:g} s")
    finally:
        if timer is not None:
            timer.cancel()
        summary = sync.summary()
        summary["seconds"] = round(loop.time() - started, 3)
        sync.abandon(sync.reason or "stopped")
        wire.flush()
        for task in waiters:
            task.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        await wire.close()
        node.close()
        if live:
            _on_signals(loop, stop, False)
    return summary

