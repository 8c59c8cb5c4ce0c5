"""A sans-I/O Cable peer: bytes in, bytes out, no sockets (in the manner of h11).

A :class:`Node` holds the store and the request table shared by all remote
peers; :meth:`Node.connect` makes one :class:`Connection` per remote peer.
The transport feeds what it reads to :meth:`Connection.receive_data`, writes
what :meth:`Connection.data_to_send` returns, calls :meth:`Node.tick` now and
then, and :meth:`Connection.close` when the socket goes.  Time is always
passed in (milliseconds), so tests drive it.

Answers (spec 1.0-draft8 §5.2, §6.3, as deployed by cable.js 0.2.1):

* post request: the posts held, then an empty post response;
* channel time range: hashes newest first; ``time_end = 0`` stays live;
* channel state: the current state; ``future = 1`` stays live and pushes
  what enters the state (the next-latest post after a delete too);
* channel list: one response; moderation state: an empty hash response;
* cancel: ends the live request, forwarded where the request went;
* ``ttl > 0``: forwarded to the other connections with ``ttl - 1``, their
  responses relayed back.

Live pushes come from ``Store.subscribe``: any commit (a remote peer, a
local author, ``ingest_many``) reaches every live request it matches.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from cablestore.errors import CableError, FramingError, UnknownRequestError
from cablestore.peer.answering import Answering, channel_state_answer
from cablestore.peer.live import STATE_TYPES, LivePushes
from cablestore.peer.requesting import Requesting
from cablestore.peer.table import (
    HASHES_PER_POST_REQUEST,
    HASHES_PER_RESPONSE,
    POST_REQUESTS_IN_FLIGHT,
    POST_RESPONSE_BYTES,
    Concluded,
    Inbound,
    Job,
    Outbound,
    Refused,
)
from cablestore.wire.decoding import Decoder
from cablestore.wire.messages import DEFAULT_LIMITS, DEPLOYED, Framing, Limits, encode

if TYPE_CHECKING:
    from cablestore.store.store import Store

log = logging.getLogger("cablestore.peer")

__all__ = [
    "Node", "Connection", "Job", "Concluded", "Refused", "channel_state_answer", "STATE_TYPES",
    "HASHES_PER_RESPONSE", "POST_RESPONSE_BYTES", "HASHES_PER_POST_REQUEST", "POST_REQUESTS_IN_FLIGHT",
]


class Node(LivePushes):
    """The store, the request table and the connections of one Cable peer.

    ``max_requests``: live requests the table holds at most (all peers);
    ``max_per_connection``: at most this many from one remote peer;
    ``timeout``: ms before a finite request (ours, or a forwarded one we
    wait on) is given up; ``seen``: how many recent ``req_id`` s are
    remembered to discard echoes and loops.
    """

    def __init__(
        self,
        store: Store,
        *,
        framing: Framing = DEPLOYED,
        limits: Limits = DEFAULT_LIMITS,
        max_requests: int = 4096,
        max_per_connection: int = 1024,
        timeout: int = 30_000,
        seen: int = 16_384,
        random: Callable[[int], bytes] = os.urandom,
    ) -> None:
        self.store = store
        self.framing = framing
        self.limits = limits
        self.max_requests = max_requests
        self.max_per_connection = max_per_connection
        self.timeout = timeout
        self.random = random
        self.connections: list[Connection] = []
        self.requests: dict[bytes, Inbound | Outbound] = {}
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self._seen_max = seen
        self._inflight: set[bytes] = set()
        # Hashes in flight that time ranges listed: the channels they listed them in.
        self._listed: dict[bytes, set[str]] = {}
        # Post requests we concluded once every post came: their closing empty
        # response is still on its way and must not count as unknown.
        self._quiet: OrderedDict[bytes, Connection] = OrderedDict()
        self.syncing: set[str] = set()  # channels a sync is running for (one at a time)
        self.lock = threading.RLock()
        self.on_output = None  # called (from any thread) when a live push queued bytes
        self._unsubscribe = store.subscribe(self._on_commit)

    def _forget(self, hashes) -> None:
        """These hashes are no longer in flight."""
        self._inflight.difference_update(hashes)
        for h in hashes:
            self._listed.pop(h, None)

    def connect(self, name: str = "peer") -> Connection:
        """A new connection to a remote peer called ``name`` (for logs and sync cursors)."""
        with self.lock:
            conn = Connection(self, name)
            self.connections.append(conn)
            return conn

    def close(self) -> None:
        """Stop listening to the store; close every connection."""
        self._unsubscribe()
        for conn in list(self.connections):
            conn.close()

    def new_req_id(self) -> bytes:
        """A fresh random ``req_id``, remembered so an echo of it is discarded."""
        with self.lock:
            while True:
                req_id = self.random(self.framing.req_id_size)
                if req_id not in self.requests and req_id not in self._seen:
                    self._remember(req_id)
                    return req_id

    def _remember(self, req_id: bytes) -> bool:
        """Record ``req_id``; False if it was already known (alive or seen lately)."""
        if req_id in self._seen or req_id in self.requests:
            return False
        self._seen[req_id] = None
        while len(self._seen) > self._seen_max:
            self._seen.popitem(last=False)
        return True

    def tick(self, now: int) -> None:
        """Time out finite requests older than ``timeout`` ms."""
        with self.lock:
            for entry in list(self.requests.values()):
                if entry.live or now - entry.started < self.timeout:
                    continue
                if isinstance(entry, Outbound):
                    entry.conn._conclude_outbound(entry, "timeout")
                    entry.conn._send_queued(now)
                elif entry.pending:
                    entry.pending.clear()
                    entry.origin._finish_inbound(entry)

class Connection(Requesting, Answering):
    """One remote peer, sans I/O: feed bytes in, take bytes out, read events."""

    def __init__(self, node: Node, name: str):
        self.node = node
        self.name = name
        self.decoder = Decoder(node.framing, node.limits)
        self._out = bytearray()
        self._events: list = []
        self.closed = False
        self.error: FramingError | None = None
        self._queue: deque = deque()  # (hashes, job, ttl) post requests not sent yet
        self._posts_in_flight = 0
        self.stats = {"received": 0, "dropped": 0, "ingested": 0, "refused": 0, "unsolicited": 0, "sent": 0}

    # --- I/O surface ----------------------------------------------------------------
    def receive_data(self, data: bytes, now: int) -> list:
        """Handle bytes read from the remote peer; return the events they caused."""
        with self.node.lock:
            if self.closed:
                return self.next_events()
            for item in self.decoder.feed(data):
                if isinstance(item, CableError):
                    self._refuse(item)
                    if isinstance(item, FramingError):
                        self.error = item
                        self.close()
                    continue
                self.stats["received"] += 1
                try:
                    self._handle(item, now)
                except CableError as exc:
                    self._refuse(exc)
            return self.next_events()

    def data_to_send(self) -> bytes:
        """Bytes to write to the remote peer (empties the buffer)."""
        with self.node.lock:
            out = bytes(self._out)
            self._out.clear()
            return out

    def next_events(self) -> list:
        """Events since the last call (conclusions of our requests, refusals)."""
        with self.node.lock:
            events, self._events = self._events, []
            return events

    def close(self) -> None:
        """The connection is gone: conclude everything that involved it."""
        with self.node.lock:
            if self.closed:
                return
            self.closed = True
            node = self.node
            self._drop_queue()
            for entry in list(node.requests.values()):
                if isinstance(entry, Outbound) and entry.conn is self:
                    self._conclude_outbound(entry, "closed")
                elif isinstance(entry, Inbound) and entry.origin is self:
                    self._drop_inbound(entry, cancel_forwards=True)
                elif isinstance(entry, Inbound) and self in entry.pending:
                    entry.pending.discard(self)
                    entry.origin._finish_inbound(entry)
            if self in node.connections:
                node.connections.remove(self)

    def pending(self, tag: object = None) -> int:
        """Finite requests of ours still alive on this connection (with ``tag``, only that sync's)."""
        with self.node.lock:
            return sum(
                1
                for e in self.node.requests.values()
                if isinstance(e, Outbound) and e.conn is self and not e.live and (tag is None or e.job.tag == tag)
            )

    # --- dispatch -------------------------------------------------------------------
    def _handle(self, m, now: int) -> None:
        if m.is_request:
            self._handle_request(m, now)
            return
        entry = self.node.requests.get(m.req_id)
        if entry is None and self.node._quiet.get(m.req_id) is self:
            if m.concludes:
                del self.node._quiet[m.req_id]
            return
        if isinstance(entry, Outbound) and entry.conn is self:
            self._handle_answer(entry, m, now)
        elif isinstance(entry, Inbound) and self in entry.forwarded:
            self._relay(entry, m)
        else:
            raise UnknownRequestError(f"{type(m).__name__} for unknown req_id {m.req_id.hex()}")

    def _refuse(self, error: CableError) -> None:
        self.stats["dropped"] += 1
        log.info("%s: dropped: %s: %s", self.name, type(error).__name__, error)
        self._events.append(Refused(error))

    def _send(self, m) -> None:
        self._out += encode(m, self.node.framing)
        self.stats["sent"] += 1
