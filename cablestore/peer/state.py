"""The state every connection of one peer shares (:class:`PeerState`): the store, the limits, the
request table, the ``req_id`` s seen, the hashes in flight, the live requests by channel, the buffer
accounting, the counters and the connections' turns.

A :class:`cablestore.peer.protocol.Connection` is handed this state, not the
:class:`cablestore.peer.node.Node` that made it, and changes it only through
the methods here; the state holds connections (as the rows of its table do)
but never calls them, except the ``on_close`` callback its owner sets.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from cablestore.peer.limits import DEFAULT_POLICY, SEEN_REQ_IDS, PeerLimits, PoolShare
from cablestore.peer.table import Inbound, Outbound
from cablestore.wire.messages import DEFAULT_LIMITS, DEPLOYED, Framing, Limits

if TYPE_CHECKING:
    from cablestore.store.store import Store


class PeerState:
    """What the connections of one peer share (see the module).

    ``policy``: the limits (:class:`cablestore.peer.limits.PeerLimits`);
    ``timeout``: ms before a finite request (ours, or a forwarded one we
    wait on) is given up (default ``policy.request_timeout``); ``seen``: how
    many recent ``req_id`` s are remembered to discard echoes and loops;
    ``pool``: this peer's share of a buffer pool it shares with others (the
    cabals of one listener, :class:`cablestore.peer.limits.FairShares`;
    default: the whole of ``policy.pool_bytes()`` its own).
    """

    def __init__(
        self,
        store: Store,
        *,
        framing: Framing = DEPLOYED,
        limits: Limits = DEFAULT_LIMITS,
        policy: PeerLimits = DEFAULT_POLICY,
        timeout: int | None = None,
        seen: int = SEEN_REQ_IDS,
        random: Callable[[int], bytes] = os.urandom,
        pool: PoolShare | None = None,
    ) -> None:
        self.store = store
        self.framing = framing
        self.limits = limits
        self.policy = policy
        self.timeout = policy.request_timeout if timeout is None else timeout
        self.random = random
        self.lock = threading.RLock()
        self.connections: dict[Any, None] = {}  # insertion-ordered; removal is O(1)
        self.requests: dict[bytes, Inbound | Outbound] = {}
        self.stats: Counter = Counter()
        self.closed_by: Counter = Counter()  # connections closed, by reason
        self.live_count = 0
        self.forward_count = 0
        self.buffered = 0  # bytes held in every connection's input and output
        self.peak_buffered = 0
        self.deferred = 0  # hashes jobs wait on while another request has them in flight
        # Per address (accepted connections) and per identified user (connections, live and forwarded requests):
        # the budgets that apply to a remote across its connections (policy.connections_per_address, connections_per_user).
        self.by_address: Counter = Counter()
        self.by_user: Counter = Counter()
        self.user_live: Counter = Counter()
        self.user_forwards: Counter = Counter()
        self.ingesting: Any = None  # the connection whose answer the store is ingesting now (its posts are not pushed back to it)
        self.syncing: dict[str, int] = {}  # channels a sync is running for: how many (one, unless one waited too long)
        self.on_output: Callable[[], None] | None = None  # called (from any thread) when a live push queued bytes
        self.on_close: Callable[[Any], None] | None = None  # called (from any thread) with a connection that closed
        self._seen: OrderedDict[bytes, int] = OrderedDict()  # req_id -> serial of the connection it came from (0: ours)
        self._seen_max = seen
        self._inflight: set[bytes] = set()  # hashes asked for or queued to be
        # Hashes in flight that time ranges listed: the channel (or channels) they listed them in.
        self._listed: dict[bytes, str | set[str]] = {}
        # Post requests we concluded once every post came: their closing empty
        # response is still on its way and must not count as unknown.
        self._quiet: OrderedDict[bytes, Any] = OrderedDict()
        self._pool = policy.pool_bytes()
        self._share = pool
        self._ready: deque = deque()
        self._dirty: dict[Any, None] = {}
        self._touched: dict[Any, None] = {}
        self._live_index: dict[Any, dict[Inbound, None]] = {}  # channel -> its live requests

    # --- buffer accounting ----------------------------------------------------------
    @property
    def pool_left(self) -> int:
        """Bytes of the shared buffer pool not in use (negative: over it); with a ``pool`` share, what the share leaves this peer."""
        if self._share is not None:
            return self._share.left
        return self._pool - self.buffered

    def account(self, delta: int) -> None:
        """``delta`` bytes more (or fewer) are buffered by some connection."""
        self.buffered += delta
        if self._share is not None:
            self._share.add(delta)
        if self.buffered > self.peak_buffered:
            self.peak_buffered = self.buffered

    # --- request ids --------------------------------------------------------------
    def new_req_id(self, size: int | None = None) -> bytes:
        """A fresh random ``req_id`` of ``size`` bytes (default: the framing's), remembered so an echo of it is discarded."""
        with self.lock:
            while True:
                req_id = self.random(self.framing.req_id_size if size is None else size)
                if req_id not in self.requests and req_id not in self._seen:
                    self.remember(req_id, 0)
                    return req_id

    def remember(self, req_id: bytes, serial: int) -> int | None:
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

    def expect_closing(self, req_id: bytes, conn: Any) -> None:
        """A post request of ours on ``conn`` concluded before its closing empty response: that response is expected."""
        self._quiet[req_id] = conn
        while len(self._quiet) > self.policy.live_total:
            self._quiet.popitem(last=False)

    def closing_expected(self, req_id: bytes, conn: Any, concludes: bool) -> bool:
        """True if a response on ``conn`` for ``req_id`` is such an expected one (forgotten once it ``concludes``)."""
        if self._quiet.get(req_id) is not conn:
            return False
        if concludes:
            del self._quiet[req_id]
        return True

    # --- hashes in flight ---------------------------------------------------------
    def in_flight(self, h: bytes) -> bool:
        """True if ``h`` is asked for, or queued to be, on some connection."""
        return h in self._inflight

    @property
    def in_flight_count(self) -> int:
        """How many hashes are asked for or queued to be."""
        return len(self._inflight)

    def add_in_flight(self, hashes: Iterable[bytes]) -> None:
        """These hashes are now asked for (or queued to be)."""
        self._inflight.update(hashes)

    @contextlib.contextmanager
    def ingesting_from(self, conn: Any) -> Iterator[None]:
        """While inside, the store's commits are of what ``conn`` sent or listed: it holds those posts, so live
        pushes skip it (``ingesting``; restored after, as such a commit may run inside another)."""
        before, self.ingesting = self.ingesting, conn
        try:
            yield
        finally:
            self.ingesting = before

    def forget(self, hashes: Iterable[bytes]) -> None:
        """These hashes are no longer in flight."""
        hashes = tuple(hashes)
        self._inflight.difference_update(hashes)
        for h in hashes:
            self._listed.pop(h, None)

    def note_listed(self, h: bytes, channel: str, *, also: bool) -> None:
        """A time range of ``channel`` listed ``h`` (in flight): ``also``, add the channel to those it was listed in; else keep the first."""
        known = self._listed.get(h)
        if known is None:
            self._listed[h] = channel
        elif not also:
            return
        elif isinstance(known, str):
            if known != channel:
                self._listed[h] = {known, channel}
        else:
            known.add(channel)

    def listed_in(self, h: bytes) -> tuple[str, ...]:
        """The channels whose time ranges listed ``h`` while it was in flight."""
        known = self._listed.get(h, ())
        return (known,) if isinstance(known, str) else tuple(known)

    # --- live requests by channel -------------------------------------------------
    def index_live(self, entry: Inbound) -> None:
        """``entry`` is live: index it by its channel."""
        self._live_index.setdefault(entry.channel, {})[entry] = None

    def unindex_live(self, entry: Inbound) -> None:
        """``entry`` is live no more."""
        index = self._live_index
        if entry.channel in index:
            index[entry.channel].pop(entry, None)
            if not index[entry.channel]:
                del index[entry.channel]

    def live_channels(self) -> list[Any]:
        """The channels (and ``MODERATION_LIVE``) with live requests indexed."""
        return list(self._live_index)

    def live_entries(self, channel: Any) -> list[Inbound]:
        """The live requests of ``channel`` that are still live."""
        return [e for e in self._live_index.get(channel, ()) if e.live]

    # --- turns and output ---------------------------------------------------------
    def schedule(self, conn: Any) -> None:
        """``conn`` has work that may run: it joins the round robin."""
        self._ready.append(conn)

    def next_ready(self) -> Any:
        """The next connection in the round robin, or None."""
        return self._ready.popleft() if self._ready else None

    @property
    def has_work(self) -> bool:
        """True while some connection has work that may run now."""
        return bool(self._ready)

    def mark_dirty(self, conn: Any) -> None:
        """``conn`` queued bytes to write."""
        self._dirty[conn] = None

    def mark_touched(self, conn: Any) -> None:
        """``conn``'s input shrank (reading it may resume)."""
        self._touched[conn] = None

    def take_dirty(self) -> list:
        """The connections that queued bytes to write since the last call."""
        with self.lock:
            dirty = list(self._dirty)
            self._dirty.clear()
            return dirty

    def take_touched(self) -> list:
        """The connections whose input shrank since the last call (reading them may resume)."""
        with self.lock:
            touched = list(self._touched)
            self._touched.clear()
            return touched

    def add_connection(self, conn: Any) -> None:
        """``conn`` is open."""
        self.connections[conn] = None
        self.stats["connections"] += 1

    def closed(self, conn: Any, reason: str) -> None:
        """``conn`` closed (for ``reason``): it leaves every list, and ``on_close`` is told."""
        self.closed_by[reason] += 1
        if conn in self.connections:
            del self.connections[conn]
            address, user = getattr(conn, "address", None), getattr(conn, "user", None)
            for table, who in ((self.by_address, address), (self.by_user, user)):
                if who is not None:
                    table[who] -= 1
                    if table[who] <= 0:
                        del table[who]
        self._dirty.pop(conn, None)
        self._touched.pop(conn, None)
        if self.on_close is not None:
            self.on_close(conn)
