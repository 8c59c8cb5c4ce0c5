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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from cablestore.errors import (
    CableError,
    DuplicateRequestError,
    FramingError,
    RequestTableFullError,
    UnknownRequestError,
    UnsolicitedPostError,
)
from cablestore.keyspace.keys import canonical_channel, channel_key, next_prefix
from cablestore.wire.codec import DELETE, INFO, JOIN, LEAVE, TEXT, TOPIC, post_hash
from cablestore.wire.messages import (
    DEFAULT_LIMITS,
    DEPLOYED,
    CancelRequest,
    ChannelListRequest,
    ChannelListResponse,
    ChannelStateRequest,
    Decoder,
    Framing,
    HashResponse,
    Limits,
    ModerationStateRequest,
    PostRequest,
    PostResponse,
    TimeRangeRequest,
    encode,
)

if TYPE_CHECKING:
    from cablestore.store.store import Store

log = logging.getLogger("cablestore.peer")

HASHES_PER_RESPONSE = 4096
POST_RESPONSE_BYTES = 256 << 10
HASHES_PER_POST_REQUEST = 1024
POST_REQUESTS_IN_FLIGHT = 4  # per connection; more wait in a queue, so none times out unanswered in our buffer
STATE_TYPES = frozenset({TOPIC, JOIN, LEAVE, INFO, DELETE})


def channel_state_answer(store: Store, channel: str) -> list[bytes]:
    """The hashes answering a channel state request.

    ``Store.channel_state`` (latest topic, latest join/leave and post/info of
    each member), plus, for each member or ex-member whose membership is
    decided by a post/topic (a topic counts as joining, spec 5.4.3) that is
    not the channel's latest, that topic: without it a peer syncing from
    here could not tell they are a member.
    """
    from cablestore.views import channel as channel_view

    hashes = store.channel_state(channel)
    ch = channel_key(channel)
    members = channel_view.PREFIX + ch + b"m"
    candidates = channel_view.PREFIX + ch + b"a"
    extra = []
    with store.db.snapshot() as snap, snap.iterator() as it:
        people = [k[len(members) :] for k in snap.iterator(prefix=members, include_value=False)]
        for pk in people:
            it.seek(next_prefix(candidates + pk))
            try:
                key, value = it.prev()
            except StopIteration:
                continue
            if key.startswith(candidates + pk) and value == bytes([TOPIC]):
                extra.append(key[-32:])
    known = set(hashes)
    return hashes + [h for h in dict.fromkeys(extra) if h not in known]


# --- events a connection reports -------------------------------------------------


@dataclass(frozen=True)
class Concluded:
    """A request this peer made has concluded (``reason``: answered, cancelled, timeout, closed)."""

    req_id: bytes
    request: object
    reason: str
    channels: tuple[str, ...] = ()


@dataclass(frozen=True)
class Refused:
    """Something the remote peer sent was dropped; ``error`` says why."""

    error: CableError


@dataclass
class Job:
    """A unit of requesting work: one request and the post requests its hashes led to.

    ``done`` once the request concluded and none of its post requests is left;
    ``complete`` if additionally nothing timed out, was cancelled or refused.
    """

    tag: object = None
    outstanding: int = 0
    concluded: bool = False
    failed: bool = False
    newest: bytes | None = None  # the first hash of a time range answer: the newest post
    hashes_seen: int = 0
    posts_requested: int = 0
    channels: tuple[str, ...] = ()

    @property
    def done(self) -> bool:
        """The request concluded and none of its post requests is left."""
        return self.concluded and self.outstanding == 0

    @property
    def complete(self) -> bool:
        """Done, and nothing timed out, was cancelled or refused."""
        return self.done and not self.failed


# --- the request table -------------------------------------------------------------


@dataclass(eq=False)
class _Inbound:
    """A request a remote peer sent us: answered locally and maybe forwarded."""

    req_id: bytes
    origin: Connection
    request: object
    started: int
    live: bool = False
    remaining: int | None = None  # hashes still allowed by ``limit``
    pending: set = field(default_factory=set)  # connections it was forwarded to, not concluded yet
    forwarded: set = field(default_factory=set)
    local_done: bool = False
    channel: str | None = None
    state: set = field(default_factory=set)


@dataclass(eq=False)
class _Outbound:
    """A request this peer sent on ``conn``."""

    req_id: bytes
    conn: Connection
    request: object
    started: int
    job: Job
    live: bool = False
    wanted: set = field(default_factory=set)


class Node:
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
        self.requests: dict[bytes, _Inbound | _Outbound] = {}
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
                if isinstance(entry, _Outbound):
                    entry.conn._conclude_outbound(entry, "timeout")
                    entry.conn._send_queued(now)
                elif entry.pending:
                    entry.pending.clear()
                    entry.origin._finish_inbound(entry)

    # --- live pushes --------------------------------------------------------------
    def _on_commit(self, change) -> None:
        with self.lock:
            lives = [e for e in self.requests.values() if isinstance(e, _Inbound) and e.live and e.local_done]
            if not lives:
                return
            delete_channels: dict[bytes, set] = {}
            pushed = False
            for entry in lives:
                if isinstance(entry.request, TimeRangeRequest):
                    hashes = self._matching_chat(entry, change, delete_channels)
                else:
                    hashes = self._state_changes(entry, change)
                if hashes:
                    entry.origin._push(entry, hashes)
                    pushed = True
        if pushed and self.on_output is not None:
            self.on_output()

    def _matching_chat(self, entry: _Inbound, change, delete_channels) -> list[bytes]:
        out = []
        for h, post in change.added:
            if post.timestamp < entry.request.time_start:
                continue
            if post.post_type == TEXT and canonical_channel(post.channel) == entry.channel:
                out.append(h)
            elif post.post_type == DELETE:
                if h not in delete_channels:
                    tombs = self.store.tombstones_made_by(h, post.hashes)
                    delete_channels[h] = {canonical_channel(c) for t in tombs for c in t.channels}
                if entry.channel in delete_channels[h]:
                    out.append(h)
        return out

    def _state_changes(self, entry: _Inbound, change) -> list[bytes]:
        relevant = bool(change.removed) or any(p.post_type in STATE_TYPES for _, p in change.added)
        if not relevant:
            return []
        now = channel_state_answer(self.store, entry.channel)
        fresh = [h for h in now if h not in entry.state]
        entry.state = set(now)
        return fresh


class Connection:
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
                if isinstance(entry, _Outbound) and entry.conn is self:
                    self._conclude_outbound(entry, "closed")
                elif isinstance(entry, _Inbound) and entry.origin is self:
                    self._drop_inbound(entry, cancel_forwards=True)
                elif isinstance(entry, _Inbound) and self in entry.pending:
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
                if isinstance(e, _Outbound) and e.conn is self and not e.live and (tag is None or e.job.tag == tag)
            )

    # --- requesting -----------------------------------------------------------------
    def request_time_range(self, channel: str, start: int = 0, end: int = 0, limit: int = 0, *, now: int, ttl: int = 0, job: Job | None = None) -> Job:
        """Ask for a channel's chat hashes; missing posts are then requested automatically."""
        return self._request(lambda r: TimeRangeRequest(r, channel, start, end, limit, ttl=ttl), now, job, live=end == 0)

    def request_state(self, channel: str, future: int = 0, *, now: int, ttl: int = 0, job: Job | None = None) -> Job:
        """Ask for a channel's state; missing posts are then requested automatically."""
        return self._request(lambda r: ChannelStateRequest(r, channel, future, ttl=ttl), now, job, live=future == 1)

    def request_channel_list(self, offset: int = 0, limit: int = 0, *, now: int, ttl: int = 0, job: Job | None = None) -> Job:
        """Ask for the channel list; the names arrive in ``job.channels``."""
        return self._request(lambda r: ChannelListRequest(r, offset, limit, ttl=ttl), now, job)

    def request_posts(self, hashes: Iterable[bytes], *, now: int, ttl: int = 0, job: Job | None = None) -> Job:
        """Ask for posts by hash (only those not held, not deleted, not already asked for)."""
        job = job or Job()
        with self.node.lock:
            self._request_missing(list(hashes), job, now, ttl)
            job.concluded = True  # no request of its own: done when its post requests are
        return job

    def cancel(self, req_id: bytes) -> None:
        """Cancel a request we made (live ones mostly); nothing answers a cancel."""
        with self.node.lock:
            entry = self.node.requests.get(req_id)
            if isinstance(entry, _Outbound) and entry.conn is self:
                self._send(CancelRequest(self.node.new_req_id(), cancel_id=req_id))
                self._conclude_outbound(entry, "cancelled")

    def _request(self, make, now: int, job: Job | None, live: bool = False) -> Job:
        job = job or Job()
        with self.node.lock:
            request = make(self.node.new_req_id())
            self._track(request, now, job, live)
        return job

    def _track(self, request, now: int, job: Job, live: bool = False, wanted=(), counted: bool = False) -> None:
        entry = _Outbound(request.req_id, self, request, now, job, live, set(wanted))
        self.node.requests[request.req_id] = entry
        if not counted:
            job.outstanding += 1
        self._send(request)

    def _request_missing(self, hashes: list[bytes], job: Job, now: int, ttl: int = 0, channel: str | None = None) -> None:
        """Ask for the hashes not held, deleted or in flight; ``channel``: the time range that listed them."""
        store, inflight = self.node.store, self.node._inflight
        missing, held, listed = [], [], self.node._listed
        for h in dict.fromkeys(hashes):
            if h in inflight:
                if channel is not None:
                    listed.setdefault(h, set()).add(channel)
            elif not store.is_deleted(h):
                (held if store.get(h) is not None else missing).append(h)
        if channel is not None:
            # A delete of posts this store never held is listed where the peer listed it.
            if held:
                store.learn_listing(channel, held)
            for h in missing:
                listed[h] = {channel}
        for i in range(0, len(missing), HASHES_PER_POST_REQUEST):
            chunk = tuple(missing[i : i + HASHES_PER_POST_REQUEST])
            inflight.update(chunk)
            job.posts_requested += len(chunk)
            job.outstanding += 1
            self._queue.append((chunk, job, ttl))
        self._send_queued(now)

    def _send_queued(self, now: int) -> None:
        """Send queued post requests while fewer than POST_REQUESTS_IN_FLIGHT are unanswered."""
        while self._queue and self._posts_in_flight < POST_REQUESTS_IN_FLIGHT and not self.closed:
            chunk, job, ttl = self._queue.popleft()
            self._posts_in_flight += 1
            self._track(PostRequest(self.node.new_req_id(), chunk, ttl=ttl), now, job, wanted=chunk, counted=True)

    def _drop_queue(self) -> None:
        while self._queue:
            chunk, job, _ = self._queue.popleft()
            self.node._forget(chunk)
            job.outstanding -= 1
            job.failed = True

    def _conclude_outbound(self, entry: _Outbound, reason: str) -> None:
        node = self.node
        if node.requests.get(entry.req_id) is not entry:
            return
        del node.requests[entry.req_id]
        node._forget(entry.wanted)
        job = entry.job
        job.outstanding -= 1
        if reason != "answered" or entry.wanted:
            job.failed = True
        if not isinstance(entry.request, PostRequest):
            job.concluded = True
        else:
            self._posts_in_flight -= 1
        self._events.append(Concluded(entry.req_id, entry.request, reason, job.channels))

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
        if isinstance(entry, _Outbound) and entry.conn is self:
            self._handle_answer(entry, m, now)
        elif isinstance(entry, _Inbound) and self in entry.forwarded:
            self._relay(entry, m)
        else:
            raise UnknownRequestError(f"{type(m).__name__} for unknown req_id {m.req_id.hex()}")

    def _handle_answer(self, entry: _Outbound, m, now: int) -> None:
        job = entry.job
        if isinstance(m, HashResponse) and not isinstance(entry.request, (PostRequest, ChannelListRequest)):
            if m.hashes:
                entry.started = now
                if job.newest is None and isinstance(entry.request, TimeRangeRequest):
                    job.newest = m.hashes[0]
                job.hashes_seen += len(m.hashes)
                channel = entry.request.channel if isinstance(entry.request, TimeRangeRequest) else None
                self._request_missing(list(m.hashes), job, now, entry.request.ttl, channel)  # fetch along the same route
            else:
                self._conclude_outbound(entry, "answered")
        elif isinstance(m, PostResponse) and isinstance(entry.request, PostRequest):
            self._ingest(entry, m.posts)
            entry.started = now  # answers are arriving: time out from the last one
            if m.concludes or not entry.wanted:
                self._conclude_outbound(entry, "answered")
                if not m.concludes:
                    self._expect_closing(entry.req_id)
                self._send_queued(now)
        elif isinstance(m, ChannelListResponse) and isinstance(entry.request, ChannelListRequest):
            job.channels = m.channels
            self._conclude_outbound(entry, "answered")
        else:
            raise UnknownRequestError(f"{type(m).__name__} does not answer a {type(entry.request).__name__}")

    def _expect_closing(self, req_id: bytes) -> None:
        quiet = self.node._quiet
        quiet[req_id] = self
        while len(quiet) > self.node.max_requests:
            quiet.popitem(last=False)

    def _ingest(self, entry: _Outbound, posts) -> None:
        solicited, listed = [], {}
        for buf in posts:
            h = post_hash(buf)
            if h in entry.wanted:
                entry.wanted.discard(h)
                for channel in self.node._listed.get(h, ()):
                    listed.setdefault(channel, []).append(h)
                self.node._forget((h,))
                solicited.append(buf)
            else:
                self.stats["unsolicited"] += 1
                self._refuse(UnsolicitedPostError(f"post {h.hex()} was not asked for"))
        if not solicited:
            return
        for result in self.node.store.ingest_many(solicited):
            if result.ok:
                self.stats["ingested"] += 1
            else:
                self.stats["refused"] += 1
                entry.job.failed = True
                self._refuse(result.error)
        for channel, hashes in listed.items():
            self.node.store.learn_listing(channel, hashes)

    def _refuse(self, error: CableError) -> None:
        self.stats["dropped"] += 1
        log.info("%s: dropped: %s: %s", self.name, type(error).__name__, error)
        self._events.append(Refused(error))

    # --- answering ------------------------------------------------------------------
    def _handle_request(self, m, now: int) -> None:
        node = self.node
        if not node._remember(m.req_id):
            raise DuplicateRequestError(f"req_id {m.req_id.hex()} is already known")
        if isinstance(m, CancelRequest):
            self._handle_cancel(m)
            return
        mine = sum(1 for e in node.requests.values() if isinstance(e, _Inbound) and e.origin is self)
        if len(node.requests) >= node.max_requests or mine >= node.max_per_connection:
            self._send(self._concluding(m))  # so the requester does not wait for a timeout
            raise RequestTableFullError(f"{len(node.requests)} requests alive, {mine} from {self.name}")
        entry = _Inbound(m.req_id, self, m, now)
        if isinstance(m, ChannelListRequest):
            # Only one channel list response may be sent, so it is never forwarded.
            self._send(ChannelListResponse(m.req_id, tuple(node.store.channel_list(m.offset, m.limit))))
            return
        node.requests[m.req_id] = entry
        self._answer(entry, m)
        entry.local_done = True
        if m.ttl > 0 and entry.remaining != 0 and not isinstance(m, ModerationStateRequest):
            self._forward(entry, replace(m, ttl=m.ttl - 1))
        self._finish_inbound(entry)

    def _answer(self, entry: _Inbound, m) -> None:
        store = self.node.store
        if isinstance(m, PostRequest):
            self._send_posts(m.req_id, [p for p in store.get_many(m.hashes) if p is not None])
        elif isinstance(m, TimeRangeRequest):
            entry.channel = canonical_channel(m.channel)
            entry.live = m.time_end == 0
            entry.remaining = m.limit or None
            self._push(entry, store.channel_time_range(m.channel, m.time_start, m.time_end, m.limit))
        elif isinstance(m, ChannelStateRequest):
            entry.channel = m.channel
            entry.live = m.future == 1
            hashes = channel_state_answer(store, m.channel)
            entry.state = set(hashes)
            self._push(entry, hashes)

    def _send_posts(self, req_id: bytes, posts: list[bytes]) -> None:
        chunk, size = [], 0
        for buf in posts:
            if chunk and size + len(buf) > POST_RESPONSE_BYTES:
                self._send(PostResponse(req_id, tuple(chunk)))
                chunk, size = [], 0
            chunk.append(buf)
            size += len(buf) + 3
        if chunk:
            self._send(PostResponse(req_id, tuple(chunk)))

    def _push(self, entry: _Inbound, hashes) -> None:
        """Send hashes for ``entry`` within its limit; reaching the limit concludes it."""
        if entry.remaining is not None:
            hashes = hashes[: entry.remaining]
            entry.remaining -= len(hashes)
        for i in range(0, len(hashes), HASHES_PER_RESPONSE):
            self._send(HashResponse(entry.req_id, tuple(hashes[i : i + HASHES_PER_RESPONSE])))
        if entry.remaining == 0:
            entry.live = False
            entry.pending.clear()
            if entry.local_done:
                self._finish_inbound(entry)

    def _forward(self, entry: _Inbound, m) -> None:
        for conn in self.node.connections:
            if conn is not self and not conn.closed:
                conn._send(m)
                entry.forwarded.add(conn)
                entry.pending.add(conn)

    def _relay(self, entry: _Inbound, m) -> None:
        """A response from a peer we forwarded ``entry`` to: pass it back to where it came from."""
        origin = entry.origin
        if isinstance(m, HashResponse) and m.hashes:
            origin._push(entry, list(m.hashes))
        elif isinstance(m, PostResponse) and m.posts:
            origin._send(PostResponse(entry.req_id, m.posts))
        elif m.concludes:
            entry.pending.discard(self)
            origin._finish_inbound(entry)

    def _finish_inbound(self, entry: _Inbound) -> None:
        """Conclude ``entry`` once our answer and every forward are done (live ones stay)."""
        if self.node.requests.get(entry.req_id) is not entry:
            return
        if entry.live or entry.pending or not entry.local_done:
            return
        del self.node.requests[entry.req_id]
        if not self.closed:
            self._send(self._concluding(entry.request))

    def _drop_inbound(self, entry: _Inbound, cancel_forwards: bool) -> None:
        if self.node.requests.get(entry.req_id) is entry:
            del self.node.requests[entry.req_id]
        if cancel_forwards:
            for conn in entry.forwarded:
                if not conn.closed:
                    conn._send(CancelRequest(self.node.new_req_id(), cancel_id=entry.req_id))

    def _handle_cancel(self, m: CancelRequest) -> None:
        entry = self.node.requests.get(m.cancel_id)
        if not isinstance(entry, _Inbound) or entry.origin is not self:
            raise UnknownRequestError(f"cancel of unknown req_id {m.cancel_id.hex()}")
        self._drop_inbound(entry, cancel_forwards=False)
        for conn in entry.forwarded:  # the same cancel, along the same route
            if not conn.closed:
                conn._send(m)

    @staticmethod
    def _concluding(request):
        if isinstance(request, PostRequest):
            return PostResponse(request.req_id)
        if isinstance(request, ChannelListRequest):
            return ChannelListResponse(request.req_id)
        return HashResponse(request.req_id)

    def _send(self, m) -> None:
        self._out += encode(m, self.node.framing)
        self.stats["sent"] += 1
