"""Many private cabals on one port: each connection gets the store of the cabal key its handshake uses.

A relay or seed node keeping several private cabals listens once
(``cablestore serve --listen HOST:PORT --cabal STORE=KEYFILE ...``,
``run_server(None, address, cabals=[(store, key), ...])``).  Every accepted
socket is first read for the Cable Handshake's message 1 only (48 bytes):
:class:`cablestore.wire.responder.ResponderKeys` tries each cabal's key on it,
from a state computed once per cabal (a try is a hash, three HMACs and a
MAC; no Diffie-Hellman), and the one that authenticates picks the cabal.
The connection then joins that cabal's own :class:`cablestore.peer.node.Node`
(its sockets' timers made on its first connection), so a cabal's posts, requests, forwards and
live pushes never reach another cabal's connections: nodes share nothing
but this listener and its budgets (below).  A message 1 no key authenticates, a plain Cable client,
or a handshake not through in time is closed with nothing sent, counted
and logged per cause and address (:class:`cablestore.peer.secure.HandshakeFailures`).

Limits are one budget for the listener, shared fairly by the cabals
(:class:`cablestore.peer.limits.FairShares`): ``policy.max_connections``
connections in all (handshakes not through yet included) and one buffer pool
(``policy.pool_bytes()``, read and write buffers of every cabal's
connections).  Half of each is reserved in equal parts, one per cabal
(``max_connections // (2 * cabals)`` connections, at least one, and
``pool_bytes() // (2 * cabals)`` bytes), and the rest is taken first come:
a busy cabal may use its reserve and the unreserved half, never another
cabal's reserve, so a flood of one cabal's connections or buffers leaves
every other cabal its share.  Each cabal's node waits on at most its part of
the hashes the pool allows (``pending_hashes``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from cablestore.errors import ArgumentError, TooManyConnectionsError, TransportError
from cablestore.peer.limits import BACKLOG, DEFAULT_POLICY, FairShares, PeerLimits
from cablestore.peer.node import Node
from cablestore.peer.pulling import Puller
from cablestore.peer.secure import HandshakeFailures, PrivateCabal, SecureChannel, failure_cause, identify, log
from cablestore.peer.sockets import Wire, _Link, _on_signals, now_ms, parse_address
from cablestore.wire.crypto import Keypair
from cablestore.wire.handshake import DEFAULT_MAX_MESSAGE, CableHandshake, Failed
from cablestore.wire.noise import DHLEN, TAGLEN
from cablestore.wire.responder import ResponderKeys

if TYPE_CHECKING:
    from cablestore.store.store import Store

MESSAGE1 = DHLEN + TAGLEN  # 48 bytes: all a socket is read for until its cabal is known


class _Cabal:
    """One store behind the shared listener: its key, its node, and its sockets once a connection came."""

    def __init__(self, store: Store, private: PrivateCabal, node: Node) -> None:
        self.store, self.private, self.node = store, private, node
        self.wire: Wire | None = None
        self.puller: Puller | None = None


class CabalListener:
    """What every socket of a many-cabal listener shares: the keys tried, the cabals, the connection slots, the failure counts."""

    def __init__(self, cabals: list[tuple[Store, bytes]], *, policy: PeerLimits = DEFAULT_POLICY, keypair: Keypair | None = None, pull: bool = True) -> None:
        if not cabals:
            raise ArgumentError("cabals: at least one (store, cabal key)")
        keypair = keypair or Keypair()
        parties = len(cabals)
        self.keys = ResponderKeys([bytes(key) for _, key in cabals])  # checked before any node subscribes to a store
        self.keypair, self.policy, self.pull = keypair, policy, pull
        self.failures = HandshakeFailures()
        self.open = 0  # sockets holding a slot: handshakes under way and connections of every cabal
        self.slots = FairShares(policy.max_connections, parties, least=1)
        self.pool = FairShares(policy.pool_bytes(), parties)
        # Each cabal's node waits on its part of the hashes the one pool allows (PeerLimits.max_pending_hashes).
        pending = policy.pending_hashes or max(4096, policy.pool_bytes() // 2 // 512 // parties)
        node_policy = dataclasses.replace(policy, pending_hashes=pending)
        self.cabals = [
            _Cabal(store, PrivateCabal(bytes(key), keypair), Node(store, policy=node_policy, pool=self.pool.share(i))) for i, (store, key) in enumerate(cabals)
        ]
        self.pending: set[_CabalLink] = set()

    def admit(self) -> bool:
        """A socket was accepted: may it hold a slot while its handshake runs?"""
        if self.open >= self.policy.max_connections:
            self.failures.stats["connections_refused"] += 1
            return False
        self.open += 1
        self.slots.outside += 1
        return True

    def place(self, index: int) -> bool:
        """Its message 1 names cabal ``index``: within that cabal's reserve, or in a slot neither another cabal nor its reserve holds?"""
        slots = self.slots
        slots.outside -= 1
        if slots.left(index) < 1:
            slots.outside += 1  # still held, for no cabal, until the socket is gone
            self.failures.stats["connections_refused"] += 1
            return False
        slots.add(index, 1)
        return True

    def release(self, index: int | None) -> None:
        """A socket that held a slot is gone (``index``: the cabal it was placed in, or None)."""
        self.open -= 1
        if index is None:
            self.slots.outside -= 1
        else:
            self.slots.add(index, -1)

    def wire_of(self, index: int) -> Wire:
        """Cabal ``index``'s sockets, made on its first connection (so a cabal nobody connects to costs no timer)."""
        cabal = self.cabals[index]
        if cabal.wire is None:
            cabal.wire = Wire(cabal.node)
            cabal.wire.on_open = identify
            cabal.wire.failures = self.failures
            if self.pull:
                puller = cabal.puller = Puller(cabal.node)
                cabal.wire.on_accept = lambda conn: puller.accept(conn, now_ms())
                cabal.wire.on_event = lambda: puller.poll(now_ms())
        return cabal.wire

    def snapshot(self) -> dict:
        """Counts: failed handshakes by cause, refusals, the reserves, and each cabal's node counts."""
        out = dict(sorted(self.failures.stats.items()))
        out["cabals"] = [c.node.snapshot() for c in self.cabals]
        out["reserved_connections"], out["reserved_buffer_bytes"] = self.slots.reserve, self.pool.reserve
        return out

    async def close(self) -> None:
        """Close every socket and node."""
        for link in list(self.pending):
            if link.transport is not None:
                link.transport.abort()
        for cabal in self.cabals:
            if cabal.wire is not None:
                if cabal.puller is not None:
                    cabal.puller.close()
                    cabal.wire.flush()
                await cabal.wire.close()
            cabal.node.close()


class _CabalLink(_Link):
    """A socket of a many-cabal listener: read for message 1 only, then a private connection of the cabal it names."""

    def __init__(self, listener: CabalListener) -> None:
        super().__init__(None, accept=True)
        self.listener = listener
        self.hs: CableHandshake | None = None
        self.index: int | None = None
        self.counted = False
        self.address: str | None = None
        self._view = memoryview(bytearray(MESSAGE1))
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        listener = self.listener
        peer = transport.get_extra_info("peername")
        self.address, self.name = (peer[0], f"{peer[0]}:{peer[1]}") if peer else (None, "peer")
        if not listener.admit():
            log.info("refused a connection from %s: %d connections open, limit %d", self.name, listener.open, listener.policy.max_connections)
            transport.abort()
            return
        self.counted = True
        listener.pending.add(self)
        policy = listener.policy
        self.hs = CableHandshake(
            initiator=False, cabal_key=None, responder_keys=listener.keys, now=now_ms(), keypair=listener.keypair,
            timeout_ms=policy.handshake_timeout, max_message=DEFAULT_MAX_MESSAGE,
        )
        self._timer = asyncio.get_running_loop().call_later(policy.handshake_timeout / 1000, self._late)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self.conn is not None or self.hs is None:
            return super().get_buffer(sizehint)
        return self._view[: max(1, MESSAGE1 - self.hs.buffered)]

    def buffer_updated(self, nbytes: int) -> None:
        if self.conn is not None:
            return super().buffer_updated(nbytes)
        if self.hs is not None and not self.hs.finished:
            self._after(self.hs.receive_data(bytes(self._view[:nbytes]), now_ms()))

    def eof_received(self) -> bool:
        if self.conn is not None:
            return super().eof_received()
        if self.hs is not None and not self.hs.finished:
            self._after(self.hs.receive_data(b"", now_ms()))
        return False

    def connection_lost(self, exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.listener.pending.discard(self)
        if self.counted:
            self.counted = False
            self.listener.release(self.index)
        if self.conn is not None:
            return super().connection_lost(exc)
        if not self.lost.done():
            self.lost.set_result(None)

    def _late(self) -> None:
        if self.conn is None and self.hs is not None and not self.hs.finished:
            self._after(self.hs.check_time(now_ms() + 1))

    def _after(self, events: list) -> None:
        failed = next((e for e in events if isinstance(e, Failed)), None)
        if failed is not None:
            self.listener.failures.record(failure_cause(failed.error), self.address, failed.error)
            self.transport.abort()
            return
        if self.hs.cabal is not None:
            self._attach(self.hs.cabal)

    def _attach(self, index: int) -> None:
        listener = self.listener
        if self._timer is not None:
            self._timer.cancel()
        listener.pending.discard(self)
        if not listener.place(index):
            log.info("refused a connection from %s: its cabal is over its share of connections", self.name)
            self.transport.abort()
            return
        self.index = index
        wire = listener.wire_of(index)
        now = now_ms()
        try:
            conn = wire.node.connect(self.name, now=now, accepted=True, framing=SecureChannel.framing, address=self.address)
        except TooManyConnectionsError as exc:
            log.info("refused a connection: %s", exc)
            self.transport.abort()
            return
        io = SecureChannel(conn, listener.cabals[index].private, initiator=False, now=now, on_open=wire.on_open, hs=self.hs, failures=listener.failures)
        wire.attach(self, conn, io)  # message 2 goes out now
        if wire.on_accept is not None:
            wire.on_accept(conn)
            wire.kick()


async def run_cabals(
    cabals: Iterable[tuple[Store, bytes]],
    address: str,
    *,
    ready: Callable[[str, int], None] | None = None,
    stop: asyncio.Event | None = None,
    policy: PeerLimits = DEFAULT_POLICY,
    pull: bool = True,
    keypair: Keypair | None = None,
    signals: bool = True,
    on_node: Callable[[Node], None] | None = None,
) -> dict:
    """Serve every (store, cabal key) of ``cabals`` on the one private listener ``address`` until ``stop`` (see the module); the counts.

    Each store is tied to its cabal first (``Store.join_cabal``: another
    cabal's store raises :class:`cablestore.errors.CabalMismatchError` before
    any socket opens).  ``on_node(node)`` is called with each cabal's
    :class:`Node` (``node.store`` is its store) before the listener opens.
    """
    pairs = [(store, bytes(key)) for store, key in cabals]
    if len({id(store) for store, _ in pairs}) != len(pairs):
        raise ArgumentError("each cabal has its own store: two cabals are never mixed in one store")
    for store, key in pairs:
        store.join_cabal(key)
    host, port = parse_address(address, listening=True)
    listener = CabalListener(pairs, policy=policy, keypair=keypair, pull=pull)
    if on_node is not None:
        for cabal in listener.cabals:
            on_node(cabal.node)
    loop = asyncio.get_running_loop()
    try:
        server = await loop.create_server(lambda: _CabalLink(listener), host, port, backlog=BACKLOG)
    except (OSError, OverflowError, ValueError) as exc:
        await listener.close()
        raise TransportError(f"cannot listen on {host}:{port}: {exc}") from exc
    bound = server.sockets[0].getsockname()[1]
    stop = stop or asyncio.Event()
    if signals:
        _on_signals(loop, stop, True)
    try:
        if ready is not None:
            ready(host, bound)
        await stop.wait()
    finally:
        if signals:
            _on_signals(loop, stop, False)
        server.close()
        await listener.close()
        with contextlib.suppress(Exception):
            await server.wait_closed()
    return {"listen": f"{host}:{bound}", **listener.snapshot()}
