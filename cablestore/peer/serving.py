"""Serving a remote peer's requests (spec 1.0-draft8 §5.2, as deployed by
cable.js 0.2.1): post requests, channel time ranges, channel state, channel
lists, moderation state and cancels, from the store (forwarding what has
``ttl > 0`` is :mod:`cablestore.peer.forwarding`).  A mixin of
:class:`cablestore.peer.protocol.Connection`.

Each request kind has one answer method, named in :attr:`Serving.ANSWERS`.
It runs when the request arrives and either answers at once (returns None)
or returns an iterator whose every step sends one more page of the answer:
the connection advances it one step per unit of work, in its turn, so a
whole channel's time range or a post request for 65,536 hashes never holds
up another connection.  When the answer method returns (or its iterator
ends) the request is concluded with its empty response, unless it stays
live or forwards are pending.  Adding a request kind is one method and one
line in ``ANSWERS``.

Never a wrong answer: every hash or post sent answers the request it is
sent for, a channel list is the store's list, and a peer within its share
of the limits always gets the whole answer.  A peer over its share gets,
for the requests that would pass it, the empty concluding response that
Cable has for "nothing (more) from me", counted as refused — never a
partial answer presented as whole to anyone else, and never an empty
channel list (a channel list needs no table entry, so it is never refused).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from cablestore.errors import DuplicateRequestError, ReconcileError, RequestTableFullError, UnknownMessageTypeError, UnknownRequestError
from cablestore.keyspace.keys import canonical_channel
from cablestore.peer import limits
from cablestore.peer.table import MODERATION_LIVE, Inbound
from cablestore.wire import reconcile
from cablestore.wire.messages import (
    SCOPE_STATE,
    CancelRequest,
    ChannelListRequest,
    ChannelListResponse,
    ChannelStateRequest,
    ChatChangesRequest,
    HashResponse,
    ModerationStateRequest,
    PostRequest,
    PostResponse,
    ReconcileRequest,
    ReconcileResponse,
    StateChangesRequest,
    TimeRangeRequest,
)


def state_items(store: Any, channel: str) -> reconcile.Items:
    """A channel's state answer as reconciliation items: ``(0, hash)``, for the answer is a set, not a history."""
    return reconcile.Items((0, h) for h in store.channel_state_answer(channel))


class Serving:
    """The serving half of a connection (see :class:`cablestore.peer.protocol.Connection`)."""

    #: The answer method of each request kind.
    ANSWERS = {
        PostRequest: "_answer_posts",
        TimeRangeRequest: "_answer_time_range",
        ChannelStateRequest: "_answer_state",
        ChannelListRequest: "_answer_channel_list",
        ModerationStateRequest: "_answer_moderation_state",
        ReconcileRequest: "_answer_reconcile",
        StateChangesRequest: "_answer_state",
        ChatChangesRequest: "_answer_time_range",
    }

    def _handle_request(self, m, now: int) -> None:
        peer = self.state
        self.stats["requests"] += 1
        if isinstance(m, (ReconcileRequest, StateChangesRequest, ChatChangesRequest)) and not peer.policy.reconcile:  # as a peer that does not know the type (§6.3.1)
            raise UnknownMessageTypeError(f"message type {m.msg_type}: this peer does not speak set reconciliation")
        first = peer.remember(m.req_id, self.serial)
        if first is not None:
            self._duplicate(m, first, now)
            return
        if isinstance(m, CancelRequest):
            self._handle_cancel(m)
            return
        entry = Inbound(m.req_id, self, m, now)
        peer.requests[m.req_id] = entry
        self.inbound[m.req_id] = entry
        more = getattr(self, self.ANSWERS[type(m)])(entry, m, now)
        if peer.requests.get(m.req_id) is not entry:
            return  # refused or concluded already
        if more is not None:
            self._answers.append((entry, more))
            self._step_answer(again=False)
        else:
            self._local_done(entry)

    def _duplicate(self, m, first: int, now: int) -> None:
        """A ``req_id`` seen before.  Ours echoed, or repeated by the same peer: dropped.  One another
        peer sent first (a forwarded request arriving by a second route): answered with its concluding
        response, so its sender need not wait for a timeout (a channel list with the true list)."""
        if first not in (0, self.serial) and not isinstance(m, CancelRequest):
            self.state.stats["duplicates_concluded"] += 1
            if isinstance(m, ChannelListRequest):
                self._send(ChannelListResponse(m.req_id, tuple(self._listed_channels(m))))
            else:
                self._send(self._concluding(m))
        raise DuplicateRequestError(f"req_id {m.req_id.hex()} is already known")

    # --- the answers, one method per request kind ----------------------------------
    def _answer_posts(self, entry: Inbound, m: PostRequest, now: int) -> Iterator | None:
        if m.ttl > 0:
            entry.relay_wanted = set(m.hashes)
            self._maybe_forward(entry, m)
        # Each post once: a request naming one post 65,536 times would otherwise be sent it 65,536 times.
        return self._post_pages(entry, tuple(dict.fromkeys(m.hashes)))

    def _post_pages(self, entry: Inbound, hashes: tuple[bytes, ...]) -> Iterator:
        store, per = self.state.store, self.state.policy.posts_per_page
        i = 0
        while i < len(hashes):
            posts, size = [], 0
            while i < len(hashes) and size < limits.POST_PAGE_BYTES and len(posts) < per:
                chunk = hashes[i : i + 16]
                i += len(chunk)
                for h, buf in zip(chunk, store.shareable(chunk, to=self.user), strict=True):  # never a local-only post
                    if buf is not None and not (self.shunned and buf[:32] in self.shunned):
                        posts.append(buf)
                        size += len(buf)
                        if entry.relay_wanted is not None:
                            entry.relay_wanted.discard(h)
            self._send_posts(entry.req_id, posts)
            if i < len(hashes):
                yield

    def _answer_time_range(self, entry: Inbound, m: TimeRangeRequest, now: int) -> Iterator | None:
        entry.channel = canonical_channel(m.channel)
        if self.state.store.channel_dropped(m.channel):
            return None  # a dropped channel is answered with nothing (moderation.md §5.1.3.7)
        if m.time_end == 0 and not self._take_live(entry):
            return None
        if isinstance(m, ChatChangesRequest):
            return None  # live from now on, without a first answer (the extension's)
        entry.remaining = m.limit or None
        self._maybe_forward(entry, m)
        return self._time_range_pages(entry, m)

    def _time_range_pages(self, entry: Inbound, m: TimeRangeRequest) -> Iterator:
        store, below = self.state.store, None
        per = self.state.policy.hashes_per_page
        while True:
            n = per if entry.remaining is None else min(per, entry.remaining)
            keys = store.time_range_page(m.channel, m.time_start, m.time_end, below, n) if n > 0 else []
            more = n > 0 and len(keys) == n
            # A live push during the pages sends only what the pages will not reach (newer than the cursor).
            entry.cursor = keys[-1][-40:] if more else None
            self.push(entry, [k[-32:] for k in keys])
            if not more or entry.remaining == 0:
                return
            below = keys[-1]
            yield

    def _answer_state(self, entry: Inbound, m: ChannelStateRequest | StateChangesRequest, now: int) -> Iterator | None:
        """A channel state request; a state changes request (the extension's) is its live form without the first answer."""
        entry.channel = canonical_channel(m.channel)
        if self.state.store.channel_dropped(m.channel):
            return None
        changes_only = isinstance(m, StateChangesRequest)
        if (changes_only or m.future == 1) and not self._take_live(entry):
            return None
        hashes = self.state.store.channel_state_answer(m.channel)
        entry.state = set(hashes)  # what the peer holds: later pushes send only what differs from it
        entry.answered_size = len(hashes)
        if not changes_only:
            self._maybe_forward(entry, m)
            self.push(entry, hashes)
        return None

    def _answer_channel_list(self, entry: Inbound, m: ChannelListRequest, now: int) -> Iterator | None:
        return self._channel_list_steps(entry, m)

    def _channel_list_steps(self, entry: Inbound, m: ChannelListRequest) -> Iterator:
        """The one response, its spellings found a part a turn (:meth:`_spelled_parts`)."""
        spelled: list[str] = []
        for i, part in enumerate(self._spelled_parts(m)):
            if i:
                yield
            spelled += part
        self._send(ChannelListResponse(m.req_id, tuple(spelled)))
        entry.answered = True  # the one response, which concludes it

    def _listed_channels(self, m: ChannelListRequest) -> list[str]:
        """The channel list answered, at once (:meth:`_spelled_parts`, joined)."""
        return [name for part in self._spelled_parts(m) for name in part]

    def _spelled_parts(self, m: ChannelListRequest) -> Iterator[list[str]]:
        """The channel list answered: the store's channels, each in the spelling its posts use
        (``Store.listed_spellings``), ``SPELLINGS_PER_TURN`` at a time (each costs reads: ~40 µs), so
        a long list delays other connections' answers by a turn at most.

        At most ``CHANNELS_PER_RESPONSE`` (what a decoder takes in one message,
        ours included): a store with more answers a page, and the peer asks
        on from ``offset`` (as :class:`cablestore.peer.sync.Sync` does).
        """
        store = self.state.store
        page, per_turn = limits.CHANNELS_PER_RESPONSE, limits.SPELLINGS_PER_TURN
        limit = m.limit if 0 < m.limit < page else page
        names = store.channel_list(m.offset, limit)
        for i in range(0, len(names), per_turn):
            yield store.listed_spellings(names[i : i + per_turn])

    def _answer_moderation_state(self, entry: Inbound, m: ModerationStateRequest, now: int) -> Iterator | None:
        """moderation.md §5.2.1.1: what ``Store.moderation_state`` lists; ``future = 1`` stays live."""
        entry.channel = MODERATION_LIVE
        if m.future == 1 and not self._take_live(entry):
            return None
        hashes = self.state.store.moderation_state(m.channels, m.oldest, to=self.user)
        entry.state = set(hashes)
        self.push(entry, hashes)
        return None

    def _answer_reconcile(self, entry: Inbound, m: ReconcileRequest, now: int) -> Iterator | None:
        """The set reconciliation extension (docs/reconcile.md): one answer, at once (:meth:`_reconciled`)."""
        self._send(ReconcileResponse(m.req_id, self._reconciled(m)))
        entry.answered = True  # the one response, which concludes it
        return None

    def _reconciled(self, m: ReconcileRequest) -> bytes:
        """The message answering ``m``: the version for a probe; b"" (refused: use native requests) past the
        connection's budget (``RECONCILE_RANGES_PER_CONNECTION`` ranges answered: each costs a few reads) or for a
        malformed message; else the answer over the scope's items.  One message is bounded by
        ``reconcile.MAX_RANGES`` and ``MAX_IDS``."""
        if m.is_probe:
            return bytes((reconcile.VERSION,))
        store = self.state.store
        if self.reconcile_ranges >= limits.RECONCILE_RANGES_PER_CONNECTION:
            self.state.stats["reconciles_refused"] += 1
            return b""
        try:
            ranges = reconcile.decode(m.message)
            if store.channel_dropped(m.channel):
                answer, cost = reconcile.answer_ranges(reconcile.Items(()), ranges)  # answered as holding nothing of it
            elif m.scope == SCOPE_STATE:
                answer, cost = reconcile.answer_ranges(state_items(store, m.channel), ranges)
            else:
                with store.range_items(m.channel) as items:
                    answer, cost = reconcile.answer_ranges(items, ranges)
            self.reconcile_ranges += cost  # its ranges, and the items its sketches read
            return answer
        except ReconcileError as exc:
            self._refuse(exc)
            return b""

    # --- long answers -----------------------------------------------------------------
    def _step_answer(self, again: bool = True) -> None:
        """Advance the oldest long answer in progress by one page (``again=False``: the newest, its first page)."""
        entry, pages = self._answers.popleft() if again else self._answers.pop()
        if self.state.requests.get(entry.req_id) is not entry:
            return  # cancelled, or the connection closed
        try:
            next(pages)
        except StopIteration:
            self._local_done(entry)
            return
        if entry.remaining == 0:
            self._local_done(entry)
            return
        self._answers.append((entry, pages))

    def _local_done(self, entry: Inbound) -> None:
        entry.local_done = True
        entry.cursor = None
        self._finish_inbound(entry)

    def _send_posts(self, req_id: bytes, posts: list[bytes]) -> None:
        chunk, size = [], 0
        for buf in posts:
            if chunk and size + len(buf) > limits.POST_RESPONSE_BYTES:
                self._send(PostResponse(req_id, tuple(chunk)))
                chunk, size = [], 0
            chunk.append(buf)
            size += len(buf) + 3
        if chunk:
            self._send(PostResponse(req_id, tuple(chunk)))

    def push(self, entry: Inbound, hashes: list[bytes]) -> None:
        """Send hashes for ``entry`` within its limit; reaching the limit concludes it."""
        if entry.remaining is not None:
            hashes = hashes[: entry.remaining]
            entry.remaining -= len(hashes)
        per = limits.HASHES_PER_RESPONSE
        for i in range(0, len(hashes), per):
            self._send(HashResponse(entry.req_id, tuple(hashes[i : i + per])))
        if entry.remaining == 0:
            entry.live = False
            self._stop_forwards(entry)
            if entry.local_done:
                self._finish_inbound(entry)

    # --- limits -----------------------------------------------------------------------
    def _take_live(self, entry: Inbound) -> bool:
        """Give ``entry`` a live slot, or refuse it (concluded at once, counted) if this peer is over its share."""
        peer, policy = self.state, self.state.policy
        held = self.live if self.user is None else peer.user_live[self.user]  # an identified user's share spans their connections
        if held >= policy.live_per_peer or (held >= policy.live_reserved and peer.live_count >= policy.live_total):
            self._refuse_request(entry, f"{held} live requests from {self.name}{' (its user)' if self.user else ''}, {peer.live_count} in all")
            return False
        entry.live = entry.holds_live = True
        self.live += 1
        if self.user is not None:
            peer.user_live[self.user] += 1
        peer.live_count += 1
        peer.index_live(entry)
        return True

    def _release(self, entry: Inbound) -> None:
        if entry.holds_live:
            entry.holds_live = False
            entry.origin.live -= 1
            if entry.origin.user is not None:
                self.state.user_live[entry.origin.user] -= 1
            self.state.live_count -= 1
            self.state.unindex_live(entry)
        if entry.holds_forward:
            entry.holds_forward = False
            entry.origin.forwards -= 1
            if entry.origin.user is not None:
                self.state.user_forwards[entry.origin.user] -= 1
            self.state.forward_count -= 1

    def _refuse_request(self, entry: Inbound, why: str) -> None:
        self._remove_inbound(entry)
        self._send(self._concluding(entry.request))  # so the requester does not wait for a timeout
        self.stats["requests_refused"] += 1
        self.state.stats["requests_refused"] += 1
        self._refuse(RequestTableFullError(why))

    # --- concluding ------------------------------------------------------------------
    def _finish_inbound(self, entry: Inbound) -> None:
        """Conclude ``entry`` once our answer and every forward are done (live ones stay)."""
        if self.state.requests.get(entry.req_id) is not entry:
            return
        if entry.live or entry.pending or not entry.local_done:
            return
        self._remove_inbound(entry)
        if not self.closed and not entry.answered:
            self._send(self._concluding(entry.request))

    def _remove_inbound(self, entry: Inbound) -> None:
        if self.state.requests.get(entry.req_id) is entry:
            del self.state.requests[entry.req_id]
        entry.origin.inbound.pop(entry.req_id, None)
        self._release(entry)

    def _drop_inbound(self, entry: Inbound, cancel_forwards: bool) -> None:
        self._remove_inbound(entry)
        for conn in entry.forwarded:
            conn.awaiting.discard(entry)
            if cancel_forwards and not conn.closed and conn in entry.pending:
                conn._send(CancelRequest(conn.new_req_id(), cancel_id=entry.req_id))
        entry.pending.clear()

    def _handle_cancel(self, m: CancelRequest) -> None:
        entry = self.state.requests.get(m.cancel_id)
        if not isinstance(entry, Inbound) or entry.origin is not self:
            raise UnknownRequestError(f"cancel of unknown req_id {m.cancel_id.hex()}")
        pending = set(entry.pending)
        self._drop_inbound(entry, cancel_forwards=False)
        for conn in pending:  # the same cancel, along the same route
            if not conn.closed:
                conn._send(m)

    @staticmethod
    def _concluding(request):
        if isinstance(request, PostRequest):
            return PostResponse(request.req_id)
        if isinstance(request, ReconcileRequest):
            return ReconcileResponse(request.req_id)  # empty: refused, the requester falls back to native requests
        return HashResponse(request.req_id)
