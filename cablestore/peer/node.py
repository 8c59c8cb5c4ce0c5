"""The node of a Cable peer: the owner of the shared state (:class:`cablestore.peer.state.PeerState`),
the connections it makes (:meth:`Node.connect`, one :class:`cablestore.peer.protocol.Connection` per
remote peer, see :mod:`cablestore.peer.protocol`), their turns, the clock and the live pushes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cablestore.errors import TooManyConnectionsError
from cablestore.peer.live import LivePushes
from cablestore.peer.protocol import Connection
from cablestore.peer.state import PeerState
from cablestore.peer.table import Outbound
from cablestore.wire.messages import Framing

if TYPE_CHECKING:
    from cablestore.store.store import Store


def _shared(name: str, doc: str) -> property:
    """An attribute of the node that is the shared state's."""

    def get(self) -> Any:
        return getattr(self.state, name)

    def put(self, value: Any) -> None:
        setattr(self.state, name, value)

    get.__doc__ = doc
    return property(get, put, doc=doc)


class Node:
    """The store, the request table, the resource policy and the connections of one Cable peer.

    The arguments are :class:`cablestore.peer.state.PeerState`'s; the node's
    attributes below are that state's.
    """

    def __init__(self, store: Store, **options: Any) -> None:
        """``options``: :class:`cablestore.peer.state.PeerState`'s (``framing``, ``limits``, ``policy``, ``timeout``, ``seen``, ``random``, ``pool``)."""
        self.state = PeerState(store, **options)
        self._serial = 0
        self._live = LivePushes(self.state)
        self._unsubscribe = store.subscribe(self._live.on_commit)

    store = _shared("store", "The store answered from and ingested into.")
    framing = _shared("framing", "The wire framing (:data:`cablestore.wire.messages.DEPLOYED`).")
    limits = _shared("limits", "The decoder's limits.")
    policy = _shared("policy", "The resource limits (:class:`cablestore.peer.limits.PeerLimits`).")
    timeout = _shared("timeout", "ms before a finite request is given up.")
    lock = _shared("lock", "The lock every connection's calls take.")
    connections = _shared("connections", "The open connections (a dict used as an ordered set).")
    requests = _shared("requests", "The request table: req_id -> Inbound or Outbound.")
    stats = _shared("stats", "Counters.")
    closed_by = _shared("closed_by", "Connections closed, by reason.")
    live_count = _shared("live_count", "Live requests in the table.")
    forward_count = _shared("forward_count", "Forwarded requests in the table.")
    buffered = _shared("buffered", "Bytes buffered by every connection.")
    peak_buffered = _shared("peak_buffered", "The most bytes buffered at once.")
    deferred = _shared("deferred", "Hashes jobs wait on while another request has them in flight.")
    syncing = _shared("syncing", "Channels a sync is running for: how many.")
    on_output = _shared("on_output", "Called (from any thread) when a live push queued bytes.")
    on_close = _shared("on_close", "Called (from any thread) with a connection that closed.")

    @property
    def pool_left(self) -> int:
        """Bytes of the shared buffer pool not in use (negative: over it)."""
        return self.state.pool_left

    @property
    def has_work(self) -> bool:
        """True while some connection has work that may run now."""
        return self.state.has_work

    def new_req_id(self) -> bytes:
        """A fresh random ``req_id``, remembered so an echo of it is discarded."""
        return self.state.new_req_id()

    def take_dirty(self) -> list[Connection]:
        """The connections that queued bytes to write since the last call."""
        return self.state.take_dirty()

    def take_touched(self) -> list[Connection]:
        """The connections whose input shrank since the last call (reading them may resume)."""
        return self.state.take_touched()

    # --- connections --------------------------------------------------------------
    def connect(self, name: str = "peer", *, now: int = 0, accepted: bool = False, framing: Framing | None = None, address: str | None = None) -> Connection:
        """A new connection to a remote peer called ``name`` (for logs and sync cursors).

        ``accepted``: the remote peer dialled us; such connections count
        against ``policy.max_connections`` (beyond it,
        :class:`cablestore.errors.TooManyConnectionsError`) and close when idle.
        ``framing``: the connection's (default the node's; draft8's over the
        Cable Handshake).  ``address``: the remote's host, for
        ``policy.connections_per_address`` (0: no such limit).
        """
        state = self.state
        with state.lock:
            if accepted and len(state.connections) >= state.policy.max_connections:
                state.stats["connections_refused"] += 1
                raise TooManyConnectionsError(f"{len(state.connections)} connections open, limit {state.policy.max_connections}")
            per = state.policy.connections_per_address
            if accepted and address is not None and per and state.by_address[address] >= per:
                state.stats["connections_refused"] += 1
                raise TooManyConnectionsError(f"{state.by_address[address]} connections open from {address}, limit {per}")
            self._serial += 1
            conn = Connection(state, name, self._serial, now, accepted, framing)
            if address is not None:
                conn.address = address
                state.by_address[address] += 1
            state.add_connection(conn)
            return conn

    def close(self) -> None:
        """Stop listening to the store; close every connection."""
        self._unsubscribe()
        for conn in list(self.state.connections):
            conn.close()

    # --- scheduling ---------------------------------------------------------------
    def run(self, now: int, slices: int = 1) -> bool:
        """Handle buffered work: up to ``slices`` turns, one connection per turn, round robin; True if work is left."""
        state = self.state
        with state.lock:
            while slices > 0:
                conn = state.next_ready()
                if conn is None:
                    break
                if conn.take_turn(now, state.policy.slice_units):
                    slices -= 1
            return state.has_work

    # --- time ---------------------------------------------------------------------
    def tick(self, now: int) -> None:
        """Time out finite requests older than ``timeout`` ms, and idle, slow or stalled connections."""
        state = self.state
        with state.lock:
            for entry in list(state.requests.values()):
                if entry.live or now - entry.started < state.timeout:
                    continue
                (entry.conn if isinstance(entry, Outbound) else entry.origin).expire(entry, now)
            for conn in list(state.connections):
                conn.settle_deferred(now)
                conn.check_time(now)
            self._live.settle()

    def snapshot(self) -> dict:
        """Counts for ``serve --json`` and the hostile-peer harness."""
        state = self.state
        with state.lock:
            out = {k: v for k, v in sorted(state.stats.items())}
            out.update(
                open_connections=len(state.connections),
                open_requests=len(state.requests),
                live_requests=state.live_count,
                forwarded_requests=state.forward_count,
                buffered_bytes=state.buffered,
                peak_buffered_bytes=state.peak_buffered,
                closed=dict(sorted(state.closed_by.items())),
            )
            return out
