"""A sans-I/O Cable peer: bytes in, bytes out, no sockets (in the manner of h11).

A :class:`cablestore.peer.Node` holds the state shared by all remote peers
(:class:`cablestore.peer.state.PeerState`: the store, the request table, the
resource policy, :class:`cablestore.peer.limits.PeerLimits`);
:meth:`Node.connect` makes one :class:`Connection` per remote peer, handing
it that state and nothing above it.  Time is always passed in
(milliseconds), so tests drive it.

Two ways to drive it:

* simply: :meth:`Connection.receive_data` handles what was read and every
  answer it leads to at once; :meth:`Connection.data_to_send` returns the
  bytes to write;
* as a server does (:mod:`cablestore.peer.transport`):
  :meth:`Connection.feed` only buffers; :meth:`Node.run` handles the
  buffered messages a slice at a time, connection after connection (round
  robin), so one connection's burst delays another's answer by at most a
  turn of each busy connection; :meth:`Connection.read_allowance` says how
  much may be read from a connection now (0: stop reading it, its input or
  unread output is over its share); :meth:`Node.take_dirty` names the
  connections with bytes to write, so nothing walks every connection per
  event; :meth:`Node.tick` times out requests and slow or idle connections.

Answers (spec 1.0-draft8 §5.2, §6.3, as deployed by cable.js 0.2.1):

* post request: the posts held, then an empty post response;
* channel time range: hashes newest first, page by page; ``time_end = 0``
  stays live;
* channel state: the current state; ``future = 1`` stays live and pushes
  what enters the state (the next-latest post after a delete too);
* channel list: one response; moderation state: an empty hash response;
* cancel: ends the live request, forwarded where the request went;
* ``ttl > 0``: forwarded to other connections with ``ttl - 1``; their
  responses are checked (posts decoded, signed, not from the far future,
  and asked for) before they are relayed back.

Live pushes come from ``Store.subscribe``: any commit (a remote peer, a
local author, ``ingest_many``) reaches every live request it matches.
"""

from __future__ import annotations

import logging
from collections import Counter, deque

from cablestore.errors import CableError, SlowPeerError, UnknownRequestError
from cablestore.peer import limits
from cablestore.peer.forwarding import Forwarding
from cablestore.peer.inbox import BadMessage, Inbox
from cablestore.peer.limits import EVENTS_KEPT
from cablestore.peer.requesting import Requesting
from cablestore.peer.serving import Serving
from cablestore.peer.state import PeerState
from cablestore.peer.table import Inbound, Outbound, Refused
from cablestore.wire.messages import Framing, PostRequest, PostResponse, encode

log = logging.getLogger("cablestore.peer")


class Connection(Requesting, Serving, Forwarding):
    """One remote peer, sans I/O: feed bytes in, take bytes out, read events.

    ``state``: what it shares with the peer's other connections (it holds no
    reference to the :class:`cablestore.peer.Node` that made it).
    ``framing``: its wire framing (default the node's): draft8's over the
    Cable Handshake (:mod:`cablestore.peer.secure`), the deployed one on
    plain TCP.  Its ``req_id`` s are of that framing's size, and requests are
    forwarded only between connections of the same framing.
    """

    def __init__(self, state: PeerState, name: str, serial: int = 0, now: int = 0, accepted: bool = False, framing: Framing | None = None):
        self.state = state
        self.name = name
        self.serial = serial
        self.accepted = accepted
        self.framing = state.framing if framing is None else framing
        self.user: bytes | None = None  # the remote's Ed25519 key, once a handshake identified a known user
        self.authenticated = False  # the remote passed a Cable Handshake (a known user or not)
        self.address: str | None = None  # the remote's host, for an accepted connection
        # Authors whose posts its post requests do not get: those who block the identified user, and those they block.
        self.shunned: frozenset[bytes] = frozenset()
        # post/infos this peer sent us (at most limits.STALE_HASHES): it holds them, so its live state
        # requests are never pushed them (one set for all its channels: any channel's state may list them)
        self.held_infos: set[bytes] = set()
        self.inbox = Inbox(self.framing, state.limits)
        self._out = bytearray()
        self._events: deque = deque(maxlen=EVENTS_KEPT)
        self.closed = False
        self.close_reason: str | None = None
        self.close_detail: str | None = None  # who closed it and why, in words (a limit: which, and its value)
        self.error: CableError | None = None
        self._queue: deque = deque()  # (hashes, job, ttl) post requests not sent yet
        self._deferred: list = []  # (hash, job, ttl, channel, deadline): listed while in flight elsewhere
        self._posts_in_flight = 0
        self._staged: list = []  # (entry, posts, listings) of post responses handled, not stored yet (Requesting.flush_staged)
        self._staged_bytes = 0
        self.inbound: dict[bytes, Inbound] = {}  # requests it sent us, alive
        self.outbound: dict[bytes, Outbound] = {}  # requests we sent on it, alive
        self.awaiting: set[Inbound] = set()  # requests forwarded to it, not concluded by it yet
        self.live = 0  # live requests of its own in the table
        self.forwards = 0  # forwarded requests of its own in the table
        self._answers: deque = deque()  # (entry, iterator) long answers in progress
        self._scheduled = False
        self.last_received = now
        self.writable = True
        self._stall_since: int | None = None
        self.reconcile_ranges = 0  # set reconciliation ranges answered for it (RECONCILE_RANGES_PER_CONNECTION)
        self.stats = {"received": 0, "dropped": 0, "ingested": 0, "refused": 0, "unsolicited": 0, "sent": 0, "requests": 0, "requests_refused": 0}
        self.errors: Counter = Counter()  # what was dropped or refused, by error class

    # --- I/O surface ----------------------------------------------------------------
    def receive_data(self, data: bytes, now: int) -> list:
        """Handle bytes read from the remote peer and all the work they lead to; return the events they caused."""
        with self.state.lock:
            self.feed(data, now)
            while not self.closed and self._work(now, 1 << 30, force=True):
                pass
            return self.next_events()

    def feed(self, data: bytes, now: int) -> None:
        """Buffer bytes read from the remote peer; ``Node.run`` handles them in turn."""
        with self.state.lock:
            if self.closed or not data:
                return
            self.last_received = now
            before = self.inbox.size
            self.inbox.feed(data, now)
            if self.inbox.broken is not None:
                self._fail_framing(self.inbox.broken)
                return
            self.state.account(self.inbox.size - before)
            self._schedule()

    def read_allowance(self) -> int:
        """How many bytes may be read from the remote peer now (0: stop reading until this grows)."""
        if self.closed:
            return 0
        peer, policy, inbox = self.state, self.state.policy, self.inbox
        if inbox.ready_bytes >= policy.input_reserved:
            return 0  # whole messages wait: handle them before reading more
        room = peer.limits.max_message + 16 - inbox.size
        if peer.pool_left <= 0:
            room = policy.input_reserved - inbox.size
        return max(0, min(policy.read_chunk, room))

    def data_to_send(self, max_bytes: int | None = None) -> bytes:
        """Bytes to write to the remote peer (at most ``max_bytes``; the rest stays for later)."""
        with self.state.lock:
            n = len(self._out) if max_bytes is None else min(max_bytes, len(self._out))
            if not n:
                return b""
            out = bytes(self._out[:n])
            del self._out[:n]
            self.state.account(-n)
            self._stall_since = None
            self._schedule()
            return out

    @property
    def output_buffered(self) -> int:
        """Bytes queued for the remote peer and not taken yet."""
        return len(self._out)

    def set_writable(self, writable: bool) -> None:
        """The transport says whether the socket takes more (False: its buffer is full)."""
        with self.state.lock:
            self.writable = writable
            if writable:
                self._stall_since = None

    def next_events(self) -> list:
        """Events since the last call (conclusions of our requests, refusals); at most the last 1,024."""
        with self.state.lock:
            events = list(self._events)
            self._events.clear()
            return events

    def close(self, reason: str = "closed") -> None:
        """The connection is gone: conclude everything that involved it."""
        with self.state.lock:
            if self.closed:
                return
            self._flush_staged(self.last_received)  # posts that came before the close are kept
            self.closed = True
            self.close_reason = reason
            peer = self.state
            peer.account(-(self.inbox.size + len(self._out)))
            self.inbox.clear()
            self._out = bytearray()
            self._answers.clear()
            self._drop_queue()
            self.drop_deferred("closed: the connection closed before these posts came")
            for entry in list(self.outbound.values()):
                self._conclude_outbound(entry, "closed")
            for entry in list(self.inbound.values()):
                self._drop_inbound(entry, cancel_forwards=True)
            for entry in list(self.awaiting):
                entry.pending.discard(self)
                entry.origin._finish_inbound(entry)
            self.awaiting.clear()
            peer.closed(self, reason)

    def pending(self, tag: object = None) -> int:
        """Finite requests of ours still alive on this connection (with ``tag``, only that sync's)."""
        with self.state.lock:
            return sum(1 for e in self.outbound.values() if not e.live and (tag is None or e.job.tag == tag))

    # --- work -----------------------------------------------------------------------
    def _output_ok(self) -> bool:
        n, policy = len(self._out), self.state.policy
        return n < policy.output_reserved or (n < policy.output_high and self.state.pool_left > 0)

    @property
    def runnable(self) -> bool:
        """True if this connection has work that may run now (its output is not backed up)."""
        if self.closed or not self._output_ok():
            return False
        return bool(self._answers) or (self.inbox.ready > 0 and len(self._answers) < self.state.policy.active_per_peer)

    def take_turn(self, now: int, units: int) -> int:
        """Its turn in the round robin (``Node.run``): up to ``units`` units of work; how many were done."""
        self._scheduled = False
        if self.closed:
            return 0
        used = self._work(now, units)
        self._schedule()
        return used

    def _schedule(self) -> None:
        if not self._scheduled and self.runnable:
            self._scheduled = True
            self.state.schedule(self)

    def _work(self, now: int, units: int, force: bool = False) -> int:
        """Do up to ``units`` units of work; return how many were done."""
        used, active = 0, self.state.policy.active_per_peer
        shrank = False
        while used < units and not self.closed and (force or self._output_ok()):
            if self.inbox.ready and len(self._answers) < active:
                before = self.inbox.size
                item = self.inbox.take()
                self.state.account(self.inbox.size - before)
                shrank = True
                self._handle_item(item, now)
            elif self._answers:
                self._step_answer()
            else:
                break
            used += 1
        self._flush_staged(now)
        if shrank and not self.closed:
            self.state.mark_touched(self)
        return used

    def _handle_item(self, item, now: int) -> None:
        if isinstance(item, BadMessage):
            self._flush_staged(now)
            self._refuse(item.error)
            entry = self.outbound.get(item.req_id) if item.req_id is not None else None
            if entry is not None:  # a malformed answer to one of our requests fails it at once
                entry.job.fail(f"malformed answer: {type(item.error).__name__}: {item.error}")
                self._conclude_outbound(entry, "malformed")
                self._send_queued(now)
            return
        self.stats["received"] += 1
        if self._staged and not self._stages(item):
            self._flush_staged(now)  # what follows may read the store: the staged posts are in it first
        try:
            self._handle(item, now)
        except CableError as exc:
            self._refuse(exc)

    def _stages(self, m) -> bool:
        """Whether handling ``m`` only stages posts: a post response to a post request of ours on this connection."""
        entry = self.state.requests.get(m.req_id) if isinstance(m, PostResponse) else None
        return isinstance(entry, Outbound) and entry.conn is self and isinstance(entry.request, PostRequest)

    def _flush_staged(self, now: int) -> None:
        try:
            self.flush_staged(now)
        except CableError as exc:
            self._refuse(exc)

    def check_time(self, now: int) -> None:
        """Close it if it is slow, stalled or idle at ``now`` (``Node.tick``)."""
        policy = self.state.policy
        reason = None
        # Not while whole messages wait to be handled: reading is paused for our backlog, not the peer's slowness.
        trickle = self.inbox.too_slow(now, policy.frame_timeout, limits.MIN_MESSAGE_RATE) if self.inbox.ready_bytes < policy.input_reserved else None
        if trickle is not None:
            reason = f"slow: {trickle}"
        elif self._out or not self.writable:
            if self._stall_since is None:
                self._stall_since = now
            elif now - self._stall_since > policy.stall_timeout:
                reason = f"stalled: read none of its answers for {now - self._stall_since} ms (limit stall_timeout, {policy.stall_timeout} ms)"
        elif (
            self.accepted
            and now - self.last_received > policy.idle_timeout
            and not (self.inbound or self.outbound or self.awaiting or self._answers or self._queue or self._deferred or self.inbox.size)
        ):
            reason = f"idle: sent nothing with nothing open for {now - self.last_received} ms (limit idle_timeout, {policy.idle_timeout} ms)"
        if reason is not None:
            self._refuse(SlowPeerError(reason))
            self.close_detail = f"this side closed it: the peer was {reason}"
            self.close(reason.split(":")[0])

    def expire(self, entry: Inbound | Outbound, now: int) -> None:
        """``entry``, a finite request of this connection's, is older than the timeout (``Node.tick``)."""
        if isinstance(entry, Outbound):
            self._conclude_outbound(entry, "timeout")
            self._send_queued(now)
        elif entry.pending:
            for conn in list(entry.pending):
                conn.awaiting.discard(entry)
            entry.pending.clear()
            self._finish_inbound(entry)

    def _fail_framing(self, error: CableError) -> None:
        self._refuse(error)
        self.error = error
        self.close("framing")

    # --- dispatch -------------------------------------------------------------------
    def _handle(self, m, now: int) -> None:
        if m.is_request:
            self._handle_request(m, now)
            return
        peer = self.state
        entry = peer.requests.get(m.req_id)
        if entry is None and peer.closing_expected(m.req_id, self, m.concludes):
            return
        if isinstance(entry, Outbound) and entry.conn is self:
            self._handle_answer(entry, m, now)
        elif isinstance(entry, Inbound) and self in entry.forwarded:
            self._relay(entry, m, now)
        else:
            raise UnknownRequestError(f"{type(m).__name__} for unknown req_id {m.req_id.hex()}")

    def _refuse(self, error: CableError) -> None:
        # Kept in an event: without its traceback, which would hold the frames and the message (up to 4 MiB) alive.
        error.__traceback__ = error.__context__ = error.__cause__ = None
        self.stats["dropped"] += 1
        self.errors[type(error).__name__] += 1
        self.state.stats["messages_dropped"] += 1
        log.info("%s: dropped: %s: %s", self.name, type(error).__name__, error)
        self._events.append(Refused(error))

    def _send(self, m) -> None:
        data = encode(m, self.framing)
        self._out += data
        self.state.account(len(data))
        self.state.mark_dirty(self)
        self.stats["sent"] += 1

    def room_for_push(self, n: int) -> bool:
        """Output that cannot wait (a live push): False, and the connection closed, if it would pass its share."""
        policy, size = self.state.policy, len(self._out) + n
        if size <= policy.output_reserved or (size <= policy.output_max and self.state.pool_left > 0):
            return True
        self._refuse(SlowPeerError(f"{len(self._out)} bytes of answers unread; a live push would pass the limit"))
        self.close("overflow")
        return False

    def new_req_id(self) -> bytes:
        """A fresh ``req_id`` of this connection's framing (see :meth:`PeerState.new_req_id`)."""
        return self.state.new_req_id(self.framing.req_id_size)
