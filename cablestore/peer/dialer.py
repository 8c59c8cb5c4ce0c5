"""Keeping connections to the peers a node knows, over asyncio: dial, pull and answer, and dial again after
:class:`cablestore.peer.dialing.Backoff`'s wait when the connection or the peer goes away.

:func:`keep_dialing` runs one peer's loop on a node's :class:`cablestore.peer.sockets.Wire`
(``run_server(..., peers=[...])`` runs one per peer beside its listeners);
:func:`run_dialer` runs one without a listener (``Peer.connect(..., reconnect=True)``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from cablestore.errors import TransportError
from cablestore.peer.dialing import CONNECT_TIMEOUT, Backoff
from cablestore.peer.limits import DEFAULT_POLICY, PeerLimits
from cablestore.peer.node import Node
from cablestore.peer.pulling import Puller
from cablestore.peer.secure import PrivateCabal, identify, require_cabal_key
from cablestore.peer.sockets import Wire, attach_dialled, dial, now_ms, parse_address
from cablestore.wire.crypto import Keypair
from cablestore.wire.handshake import CABLE_PROLOGUE

if TYPE_CHECKING:
    from cablestore.store.store import Store


async def keep_dialing(
    wire: Wire, puller: Puller, address: str, stop: asyncio.Event, *, private: PrivateCabal | None = None, backoff: Backoff | None = None
) -> None:
    """Keep a two-way connection to the peer at ``address`` until ``stop``: dial, pull (its history, then live) and answer it;
    when the connection or the peer goes away, dial again after :class:`cablestore.peer.dialing.Backoff`'s wait.

    Its sync cursors are kept under ``peer:<address>`` (the address we dial is
    the peer's stable name), so a reconnect asks only for what is newer.  A peer
    that is down costs at most one attempt per backoff interval; the node's
    counters say how many were made (``dials``), failed (``dials_failed``) and
    went through (``dialled``).
    """
    backoff = backoff or Backoff()
    node, loop = wire.node, asyncio.get_running_loop()
    host, port = parse_address(address)
    while not stop.is_set():
        node.stats["dials"] += 1
        try:
            link = await asyncio.wait_for(dial(host, port), CONNECT_TIMEOUT)
        except (TimeoutError, TransportError):
            node.stats["dials_failed"] += 1
        else:
            started = loop.time()
            conn = attach_dialled(wire, link, address, private)
            node.stats["dialled"] += 1
            puller.accept(conn, now_ms(), cursor=f"peer:{address}")
            wire.kick(flush=True)
            while not conn.closed and not stop.is_set():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.2)
            if stop.is_set():
                return
            backoff.connected_for(loop.time() - started)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), backoff.next_wait())


async def run_dialer(
    store: Store,
    address: str,
    *,
    stop: asyncio.Event,
    policy: PeerLimits = DEFAULT_POLICY,
    cabal_key: bytes | None = None,
    keypair: Keypair | None = None,
    prologue: bytes = CABLE_PROLOGUE,
    backoff: Backoff | None = None,
) -> dict:
    """Keep a connection to the peer at ``address`` until ``stop`` (:func:`keep_dialing`, with no listener); return the node's counts.

    What an embedded :class:`cablestore.peer.embedded.Peer` runs for
    ``connect(..., reconnect=True)``.  ``cabal_key``: over the Cable Handshake
    (the store is tied to the cabal first).
    """
    private = None
    if cabal_key is not None:
        private = PrivateCabal(bytes(cabal_key), keypair, prologue)
        store.join_cabal(private.cabal_key)
    else:
        require_cabal_key(store, "connect")  # a dialled peer is answered too: a private cabal's store is never offered plain
    parse_address(address)
    node = Node(store, policy=policy)
    wire = Wire(node)
    wire.on_open = identify
    puller = Puller(node)
    wire.on_event = lambda: puller.poll(now_ms())
    try:
        await keep_dialing(wire, puller, address, stop, private=private, backoff=backoff)
    finally:
        puller.close()
        wire.flush()
        await wire.close()
        node.close()
    return {"peer": address, **node.snapshot()}


__all__ = ["keep_dialing", "run_dialer"]
