"""Answering a remote peer's requests (spec 1.0-draft8 §5.2, as deployed by
cable.js 0.2.1): post requests, channel time ranges, channel state, channel
lists, cancels, and forwarding what has ``ttl > 0``.  A mixin of
:class:`cablestore.peer.protocol.Connection`."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from cablestore.errors import DuplicateRequestError, RequestTableFullError, UnknownRequestError
from cablestore.keyspace.keys import canonical_channel, channel_key, next_prefix
from cablestore.peer.table import HASHES_PER_RESPONSE, POST_RESPONSE_BYTES, Inbound
from cablestore.wire.codec import TOPIC
from cablestore.wire.messages import (
    CancelRequest,
    ChannelListRequest,
    ChannelListResponse,
    ChannelStateRequest,
    HashResponse,
    ModerationStateRequest,
    PostRequest,
    PostResponse,
    TimeRangeRequest,
)

if TYPE_CHECKING:
    from cablestore.store.store import Store


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


class Answering:
    """The answering half of a connection (see :class:`cablestore.peer.protocol.Connection`)."""

    def _handle_request(self, m, now: int) -> None:
        node = self.node
        if not node._remember(m.req_id):
            raise DuplicateRequestError(f"req_id {m.req_id.hex()} is already known")
        if isinstance(m, CancelRequest):
            self._handle_cancel(m)
            return
        mine = sum(1 for e in node.requests.values() if isinstance(e, Inbound) and e.origin is self)
        if len(node.requests) >= node.max_requests or mine >= node.max_per_connection:
            self._send(self._concluding(m))  # so the requester does not wait for a timeout
            raise RequestTableFullError(f"{len(node.requests)} requests alive, {mine} from {self.name}")
        entry = Inbound(m.req_id, self, m, now)
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

    def _answer(self, entry: Inbound, m) -> None:
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

    def _push(self, entry: Inbound, hashes) -> None:
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

    def _forward(self, entry: Inbound, m) -> None:
        for conn in self.node.connections:
            if conn is not self and not conn.closed:
                conn._send(m)
                entry.forwarded.add(conn)
                entry.pending.add(conn)

    def _relay(self, entry: Inbound, m) -> None:
        """A response from a peer we forwarded ``entry`` to: pass it back to where it came from."""
        origin = entry.origin
        if isinstance(m, HashResponse) and m.hashes:
            origin._push(entry, list(m.hashes))
        elif isinstance(m, PostResponse) and m.posts:
            origin._send(PostResponse(entry.req_id, m.posts))
        elif m.concludes:
            entry.pending.discard(self)
            origin._finish_inbound(entry)

    def _finish_inbound(self, entry: Inbound) -> None:
        """Conclude ``entry`` once our answer and every forward are done (live ones stay)."""
        if self.node.requests.get(entry.req_id) is not entry:
            return
        if entry.live or entry.pending or not entry.local_done:
            return
        del self.node.requests[entry.req_id]
        if not self.closed:
            self._send(self._concluding(entry.request))

    def _drop_inbound(self, entry: Inbound, cancel_forwards: bool) -> None:
        if self.node.requests.get(entry.req_id) is entry:
            del self.node.requests[entry.req_id]
        if cancel_forwards:
            for conn in entry.forwarded:
                if not conn.closed:
                    conn._send(CancelRequest(self.node.new_req_id(), cancel_id=entry.req_id))

    def _handle_cancel(self, m: CancelRequest) -> None:
        entry = self.node.requests.get(m.cancel_id)
        if not isinstance(entry, Inbound) or entry.origin is not self:
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
