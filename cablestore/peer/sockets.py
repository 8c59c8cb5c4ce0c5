"""The socket side of a peer: one ``asyncio.BufferedProtocol`` per connection (:class:`_Link`), read only as far
as the node's resource policy allows, and the :class:`Wire` that runs a node's work in slices between reads and
writes only where there are bytes to write.  :mod:`cablestore.peer.transport` builds servers and syncs on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
from collections.abc import Callable

from cablestore.errors import TooManyConnectionsError, TransportError
from cablestore.peer.limits import PUMP_SECONDS, WRITE_CHUNK
from cablestore.peer.node import Node
from cablestore.peer.protocol import Connection
from cablestore.peer.secure import HandshakeFailures, PrivateCabal, SecureChannel, identify

log = logging.getLogger("cablestore.peer.transport")  # one logger for the TCP side
TCP_CLOSE, TCP_CLOSE_WAIT = 7, 8  # tcpi_state values (Linux)
ABORTED = {"slow", "stalled", "idle", "overflow", "framing", "left", "handshake", "blocked", "per-user"}  # reasons a socket is reset, its unsent bytes dropped


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


def _on_signals(loop, stop: asyncio.Event, install: bool) -> None:
    """SIGINT and SIGTERM set ``stop`` (``install``), or no longer do."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            if install:
                loop.add_signal_handler(sig, stop.set)
            else:
                loop.remove_signal_handler(sig)


class _Link(asyncio.BufferedProtocol):
    """One socket of a :class:`Wire`: reads what its connection allows, writes what it has."""

    def __init__(self, wire: Wire | None = None, accept: bool = False, private: PrivateCabal | None = None):
        self.wire = wire
        self.accept = accept
        self.private = private  # a private listener's: every accepted socket speaks the Cable Handshake
        self.conn: Connection | None = None
        self.io: Connection | SecureChannel | None = None  # what bytes go through: the Connection, or the handshake around it
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
        framing = None if self.private is None else SecureChannel.framing
        now = now_ms()
        try:
            conn = self.wire.node.connect(
                f"{peer[0]}:{peer[1]}" if peer else "peer", now=now, accepted=True, framing=framing, address=peer[0] if peer else None,
            )
        except TooManyConnectionsError as exc:
            log.info("refused a connection: %s", exc)
            transport.abort()
            return
        io = None if self.private is None else SecureChannel(conn, self.private, initiator=False, now=now, on_open=self.wire.on_open, failures=self.wire.failures)
        self.wire.attach(self, conn, io)
        if self.wire.on_accept is not None:
            self.wire.on_accept(conn)
            self.wire.kick()

    def get_buffer(self, sizehint: int) -> memoryview:
        n = self.io.read_allowance() if self.io is not None else 0
        return self.wire.view[: max(1, n)] if self.wire is not None else memoryview(bytearray(1))

    def buffer_updated(self, nbytes: int) -> None:
        if self.conn is None or self.conn.closed:
            return
        self.io.feed(bytes(self.wire.view[:nbytes]), now_ms())
        if self.io is not self.conn:
            self.write()  # the handshake's answer, or the end-of-stream marker
        self.update_reading()
        self.wire.kick()

    def eof_received(self) -> bool:
        self.eof = True
        if self.io is not None and self.io is not self.conn and not self.conn.closed:
            self.io.feed(b"", now_ms())  # over the handshake, the end of the socket without a marker ends the connection
            return False
        if self.wire is not None:
            self.write()  # nothing left to answer: closed now (else once its last input is handled, see Wire._pump)
            self.wire.kick()
        return True  # keep writing the answers to what it sent; closed once they are out

    def connection_lost(self, exc) -> None:
        if self.conn is not None and not self.conn.closed:
            self.conn.close_detail = (
                f"the connection was lost ({exc})" if exc else "the peer closed it (it may have judged this side slow or over a limit: its log says which)"
            )
            self.conn.close("lost" if exc else "closed")
        if isinstance(self.io, SecureChannel):
            self.io.release()
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
        if self.io.read_allowance() > 0:
            if self.paused:
                self._resume()
        else:
            self._pause()
            if self.wire.node.pool_left <= 0:
                self.wire.pool_paused[self] = None

    def write(self) -> None:
        """Hand the socket what it takes now; close a half-closed peer once its answers are out."""
        conn, io, transport = self.conn, self.io, self.transport
        if conn is None or transport is None or transport.is_closing():
            return
        while conn.writable and io.output_buffered:
            data = io.data_to_send(WRITE_CHUNK)
            if not data:
                break
            transport.write(data)
        if io is not conn and io.ended and not io.output_buffered:
            conn.close("ended")  # both end-of-stream markers exchanged
        elif self.eof and not conn.runnable and not conn.output_buffered and not conn.inbox.ready:
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
        self.on_open: Callable[[SecureChannel, int], None] | None = None  # a handshake went through (the remote is identified)
        self.failures = HandshakeFailures(node.state.stats)  # failed handshakes on this node's private listeners
        self._kicked = False
        self._closing = False
        node.on_output = self._wake
        node.on_close = self._closed
        policy = node.policy
        shortest = min(policy.frame_timeout, policy.stall_timeout, policy.idle_timeout, policy.handshake_timeout, node.timeout) or 1000
        self.tick_seconds = min(1.0, max(0.05, shortest / 4000))
        self._ticker = self.loop.create_task(self._tick())

    def attach(self, link: _Link, conn: Connection, io: SecureChannel | None = None) -> None:
        """Pair a socket with its connection (and the handshake around it, ``io``, if private) and start reading it."""
        link.wire, link.conn, link.io = self, conn, conn if io is None else io
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
        if link is not None and isinstance(link.io, SecureChannel):
            link.io.release()
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
                if link.eof:
                    link.write()  # a half-closed peer whose last input needed no answer is closed too
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
            now = now_ms()
            for link in [link for link in self.links.values() if isinstance(link.io, SecureChannel)]:
                link.io.check_time(now)  # the handshake's deadline, a slow message, the wait for the remote's marker
                link.write()
            self.node.tick(now)
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
        now = now_ms()
        for link in links:
            if isinstance(link.io, SecureChannel) and not link.conn.closed:
                link.io.end(now)  # our end-of-stream marker goes before the socket closes
                link.write()
            if link.transport is not None:
                link.transport.close()
        if links:
            await asyncio.wait([link.lost for link in links], timeout=5)
        self.node.on_output = None
        self.node.on_close = None


def attach_dialled(wire: Wire, link: _Link, name: str, private: PrivateCabal | None) -> Connection:
    """A connection for a socket we dialled, over the handshake (as its initiator) when ``private``."""
    now = now_ms()
    if private is None:
        conn = wire.node.connect(name, now=now)
        wire.attach(link, conn)
        return conn
    conn = wire.node.connect(name, now=now, framing=SecureChannel.framing)
    wire.attach(link, conn, SecureChannel(conn, private, initiator=True, now=now, on_open=identify))
    return conn


async def dial(host: str, port: int) -> _Link:
    """Open a TCP connection (not read from until attached to a :class:`Wire`); refusals are :class:`TransportError`."""
    loop = asyncio.get_running_loop()
    try:
        _, link = await loop.create_connection(_Link, host, port)
    except (OSError, OverflowError, ValueError) as exc:
        raise TransportError(f"cannot connect to {host}:{port}: {exc}") from exc
    return link
