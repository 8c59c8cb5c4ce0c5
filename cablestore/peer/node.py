"""The node of a Cable peer: the store, the request table shared by every remote peer, the resource policy,
the connections and the live pushes.  :meth:`Node.connect` makes one
:class:`cablestore.peer.protocol.Connection` per remote peer (see :mod:`cablestore.peer.protocol`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from cablestore.errors import TooManyConnectionsError
from cablestore.peer.limits import DEFAULT_POLICY, PeerLimits
from cablestore.peer.live import LivePushes
from cablestore.peer.table import (
    Inbound,
    Outbound,
)
from cablestore.wire.messages import DEFAULT_LIMITS, DEPLOYED, Framing, Limits

if TYPE_CHECKING:
    from cablestore.peer.protocol import Connection
    from cablestore.store.store import Store

log = logging.getLogger("cablestore.peer")

class Node(LivePushes):
    """The store, the request table, the resource policy and the connections of one Cable peer.

    ``policy``: the limits (:class:`cablestore.peer.limits.PeerLimits`);
    ``timeout``: ms before a finite request (ours, or a forwarded one we
    wait on) is given up (default ``policy.request_timeout``); ``seen``: how
    many recent ``req_id`` s are remembered to discard echoes and loops.
    """

    def __init__(
        self,
        store: Store,
        *,
        framing: Framing = DEPLOYED,
        limits: Limits = DEFAULT_LIMITS,
        policy: PeerLimits = DEFAULT_POLICY,
        timeout: int | None = None,
        seen: int = 16_384,
        random: Callable[[int], bytes] = os.urandom,
    ) -> None:
        self.store = store
        self.framing = framing
        self.limits = limits
        self.policy = policy
        self.timeout = policy.request_timeout if timeout is None else timeout
        self.random = random
        self.connections: dict[Connection, None] = {}  # insertion-ordered; removal is O(1)
        self.requests: dict[bytes, Inbound | Outbound] = {}
        self._seen: OrderedDict[bytes, int] = OrderedDict()  # req_id -> serial of the connection it came from (0: ours)
        self._seen_max = seen
        self._inflight: set[bytes] = set()  # hashes asked for or queued to be
        self.deferred = 0  # hashes jobs wait on while another request has them in flight
        # Hashes in flight that time ranges listed: the channel (or channels) they listed them in.
        self._listed: dict[bytes, str | set[str]] = {}
        # Post requests we concluded once every post came: their closing empty
        # response is still on its way and must not count as unknown.
        self._quiet: OrderedDict[bytes, Connection] = OrderedDict()
        self.syncing: dict[str, int] = {}  # channels a sync is running for: how many (one, unless one waited too long)
        self.lock = threading.RLock()
        self.on_output = None  # called (from any thread) when a live push queued bytes
        self.on_close = None  # called (from any thread) with a connection that closed
        self.live_count = 0
        self.forward_count = 0
        self.buffered = 0  # bytes held in every connection's input and output
        self.peak_buffered = 0
        self.stats: Counter = Counter()
        self.closed_by: Counter = Counter()  # connections closed, by reason
        self._pool = policy.pool_bytes()
        self._serial = 0
        self._ready: deque[Connection] = deque()
        self._dirty: dict[Connection, None] = {}
        self._touched: dict[Connection, None] = {}
        self._live_index: dict[str, dict[Inbound, None]] = {}  # channel -> its live requests
        self._unsubscribe = store.subscribe(self._on_commit)

    # --- connections --------------------------------------------------------------
    def connect(self, name: str = "peer", *, now: int = 0, accepted: bool = False) -> Connection:
        """A new connection to a remote peer called ``name`` (for logs and sync cursors).

        ``accepted``: the remote peer dialled us; such connections count
        against ``policy.max_connections`` (beyond it,
        :class:`cablestore.errors.TooManyConnectionsError`) and close when idle.
        """
        with self.lock:
            if accepted and len(self.connections) >= self.policy.max_connections:
                self.stats["connections_refused"] += 1
                raise TooManyConnectionsError(f"{len(self.connections)} connections open, limit {self.policy.max_connections}")
            self._serial += 1
            from cablestore.peer.protocol import Connection  # the node makes connections; they import the node

            conn = Connection(self, name, self._serial, now, accepted)
            self.connections[conn] = None
            self.stats["connections"] += 1
            return conn

    def close(self) -> None:
        """Stop listening to the store; close every connection."""
        self._unsubscribe()
        for conn in list(self.connections):
            conn.close()

    def _forget(self, hashes) -> None:
        """These hashes are no longer in flight."""
        self._inflight.difference_update(hashes)
        for h in hashes:
            self._listed.pop(h, None)

    @property
    def pool_left(self) -> int:
        """Bytes of the shared buffer pool not in use (negative: over it)."""
        return self._pool - self.buffered

    def _account(self, delta: int) -> None:
        self.buffered += delta
        if self.buffered > self.peak_buffered:
            self.peak_buffered = self.buffered

    # --- request ids --------------------------------------------------------------
    def new_req_id(self) -> bytes:
        """A fresh random ``req_id``, remembered so an echo of it is discarded."""
        with self.lock:
            while True:
                req_id = self.random(self.framing.req_id_size)
                if req_id not in self.requests and req_id not in self._seen:
                    self._remember(req_id, 0)
                    return req_id

    def _remember(self, req_id: bytes, serial: int) -> int | None:
        """Record that ``req_id`` came from connection ``serial`` (0: ours); if it was known, the serial it came from first."""
        known = self._seen.get(req_id)
        if known is not None:
            return known
        entry = self.requests.get(req_id)
        if entry is not None:
            return entry.origin.serial if isinstance(entry, Inbound) else 0
        self._seen[req_id] = serial
        while len(self._seen) > self._seen_max:
            self._seen.popitem(last=False)
        return None

    # --- scheduling ---------------------------------------------------------------
    def run(self, now: int, slices: int = 1) -> bool:
        """Handle buffered work: up to ``slices`` turns, one connection per turn, round robin; True if work is left."""
        with self.lock:
            ready = self._ready
            while slices > 0 and ready:
                conn = ready.popleft()
                conn._scheduled = False
                if conn.closed:
                    continue
                if conn._work(now, self.policy.slice_units):
                    slices -= 1
                conn._schedule()
            return bool(ready)

    @property
    def has_work(self) -> bool:
        """True while some connection has work that may run now."""
        return bool(self._ready)

    def take_dirty(self) -> list[Connection]:
        """The connections that queued bytes to write since the last call."""
        with self.lock:
            dirty = list(self._dirty)
            self._dirty.clear()
            return dirty

    def take_touched(self) -> list[Connection]:
        """The connections whose input shrank since the last call (reading them may resume)."""
        with self.lock:
            touched = list(self._touched)
            self._touched.clear()
            return touched

    # --- time ---------------------------------------------------------------------
    def tick(self, now: int) -> None:
        """Time out finite requests older than ``timeout`` ms, and idle, slow or stalled connections."""
        with self.lock:
            for entry in list(self.requests.values()):
                if entry.live or now - entry.started < self.timeout:
                    continue
                if isinstance(entry, Outbound):
                    entry.conn._conclude_outbound(entry, "timeout")
                    entry.conn._send_queued(now)
                elif entry.pending:
                    for conn in list(entry.pending):
                        conn.awaiting.discard(entry)
                    entry.pending.clear()
                    entry.origin._finish_inbound(entry)
            for conn in list(self.connections):
                conn._settle_deferred(now)
                conn._check_time(now)

    def snapshot(self) -> dict:
        """Counts for ``serve --json`` and the hostile-peer harness."""
        with self.lock:
            out = {k: v for k, v in sorted(self.stats.items())}
            out.update(
                open_connections=len(self.connections),
                open_requests=len(self.requests),
                live_requests=self.live_count,
                forwarded_requests=self.forward_count,
                buffered_bytes=self.buffered,
                peak_buffered_bytes=self.peak_buffered,
                closed=dict(sorted(self.closed_by.items())),
            )
            return out
