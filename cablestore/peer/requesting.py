"""Requesting from a remote peer: time ranges, channel state, channel lists
and the post requests their hashes lead to, and ingesting the answers.  A
mixin of :class:`cablestore.peer.protocol.Connection`.

Memory stays bounded whatever the peer sends: at most
``policy.max_pending_hashes()`` hashes are waited on at once (queued or
asked for); a response that would pass it fails its request (reason
``overflow``) and cancels it, and only what fits is fetched.  An answer of the
wrong type, or one that does not decode, fails the request it names at once.

The posts of the post responses a connection handles in one turn are stored
together (:meth:`Requesting.flush_staged`: one ``ingest_many``, one
WriteBatch): a response holds at most ``posts_per_page`` (64) posts, and a
commit's fixed cost (the WriteBatch write, settling, live pushes, the
verify thread's start) paid per 64 posts made a 1M-post sync 0.71 x the
store's own ingest of 1,000-post batches.  Nothing else of the connection is
handled in between (any other message flushes first, and so does the end of
its turn), so nothing can see a staged post neither stored nor in flight.
"""

from __future__ import annotations

from collections.abc import Iterable

from cablestore.errors import CableError, UnknownRequestError, UnsolicitedPostError
from cablestore.peer import limits
from cablestore.peer.table import Concluded, Job, Outbound
from cablestore.wire.codec import DELETE, post_hash, post_type_of
from cablestore.wire.messages import (
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


class Requesting:
    """The requesting half of a connection (see :class:`cablestore.peer.protocol.Connection`)."""

    def request_time_range(self, channel: str, start: int = 0, end: int = 0, limit: int = 0, *, now: int, ttl: int = 0, job: Job | None = None) -> Job:
        """Ask for a channel's chat hashes; missing posts are then requested automatically."""
        return self._request(lambda r: TimeRangeRequest(r, channel, start, end, limit, ttl=ttl), now, job, live=end == 0)

    def request_state(self, channel: str, future: int = 0, *, now: int, ttl: int = 0, job: Job | None = None) -> Job:
        """Ask for a channel's state; missing posts are then requested automatically."""
        return self._request(lambda r: ChannelStateRequest(r, channel, future, ttl=ttl), now, job, live=future == 1)

    def request_chat_changes(self, channel: str, start: int = 0, *, now: int, job: Job | None = None) -> Job:
        """Ask for a channel's chat posts stored from now on with a timestamp from ``start`` (the extension's live time
        range request, without the first answer)."""
        return self._request(lambda r: ChatChangesRequest(r, channel, start), now, job, live=True)

    def request_state_changes(self, channel: str, *, now: int, job: Job | None = None) -> Job:
        """Ask for a channel's state changes from now on (the extension's live state request, without the first answer)."""
        return self._request(lambda r: StateChangesRequest(r, channel), now, job, live=True)

    def request_moderation_state(self, channels: Iterable[str], future: int = 0, oldest: int = 0, *, now: int, ttl: int = 0, job: Job | None = None) -> Job:
        """Ask for the moderation state of ``channels`` (and the cabal; message type 8); missing posts are then requested."""
        names = tuple(channels)
        return self._request(lambda r: ModerationStateRequest(r, names, future, oldest, ttl=ttl), now, job, live=future == 1)

    def request_channel_list(self, offset: int = 0, limit: int = 0, *, now: int, ttl: int = 0, job: Job | None = None) -> Job:
        """Ask for the channel list; the names arrive in ``job.channels``."""
        return self._request(lambda r: ChannelListRequest(r, offset, limit, ttl=ttl), now, job)

    def request_reconcile(self, channel: str, scope: int, message: bytes, *, now: int, job: Job | None = None) -> Job:
        """One round of set reconciliation (docs/reconcile.md); the answer's message arrives in ``job.reply``."""
        return self._request(lambda r: ReconcileRequest(r, channel, scope, message), now, job)

    def drop_request(self, job: Job) -> None:
        """Stop waiting for the answers to ``job``'s requests without telling the peer (a probe it ignored)."""
        with self.state.lock:
            for entry in [e for e in self.outbound.values() if e.job is job]:
                self._conclude_outbound(entry, "ignored")

    def request_posts(self, hashes: Iterable[bytes], *, now: int, ttl: int = 0, job: Job | None = None, channel: str | None = None) -> Job:
        """Ask for posts by hash (only those not held, not deleted, not already asked for); ``channel``: where they were listed."""
        job = job or Job()
        with self.state.lock:
            self._request_missing(list(hashes), job, now, ttl, channel)
            job.concluded = True  # no request of its own: done when its post requests are
        return job

    def cancel(self, req_id: bytes) -> None:
        """Cancel a request we made (live ones mostly); nothing answers a cancel."""
        with self.state.lock:
            entry = self.outbound.get(req_id)
            if entry is not None:
                self._send(CancelRequest(self.new_req_id(), cancel_id=req_id))
                self._conclude_outbound(entry, "cancelled")

    def _request(self, make, now: int, job: Job | None, live: bool = False) -> Job:
        job = job or Job()
        with self.state.lock:
            request = make(self.new_req_id())
            self._track(request, now, job, live)
        return job

    def _track(self, request, now: int, job: Job, live: bool = False, wanted=(), counted: bool = False) -> None:
        entry = Outbound(request.req_id, self, request, now, job, live, set(wanted))
        self.state.requests[request.req_id] = entry
        self.outbound[request.req_id] = entry
        if not counted:
            job.outstanding += 1
        job.requests += 1
        self._send(request)

    def _request_missing(self, hashes: list[bytes], job: Job, now: int, ttl: int = 0, channel: str | None = None, force: bool = False) -> bool:
        """Ask for the hashes not held, deleted or in flight; ``channel``: the time range that listed them.

        A hash another request has in flight is deferred, not dropped: the job
        waits for it (see :meth:`settle_deferred`).  ``force``: ask for the
        hashes in flight too.  Returns False if not all of them fit under the
        pending-hash bound (the job is failed).
        """
        peer = self.state
        store, in_flight = peer.store, peer.in_flight
        fresh, waits = [], []
        for h in dict.fromkeys(hashes):
            if in_flight(h) and not force:
                waits.append(h)
                if channel is not None:
                    peer.note_listed(h, channel, also=True)
            else:
                fresh.append(h)
        held, unheld = [], []  # held: the post/deletes held (what a listing may teach, see learn_listing)
        for h, buf in zip(fresh, store.get_many(fresh), strict=True):
            if buf is None:
                unheld.append(h)
            elif post_type_of(buf) == DELETE:
                held.append(h)
        tombstoned = store.tombstoned(unheld)
        missing = [
            h for h in unheld
            if (h not in tombstoned or not store.is_deleted(h)) and not store.is_dropped(h)  # a dropped post is not requested (§4.4.6)
        ]
        fits, bound = True, peer.policy.max_pending_hashes()
        # Hashes waited on: the ones in flight already count (``inflight``); a wait is a
        # reference to one of them, bounded on its own (``peer.deferred``).
        new = [h for h in missing if not in_flight(h)]  # (only ``force`` asks again for some in flight)
        room, wait_room = bound - peer.in_flight_count, bound - peer.deferred
        if len(new) > room or len(waits) > wait_room:
            fits = False
            job.fail(f"overflow: the peer listed more than {bound} posts to fetch at once")
            if len(new) > room:
                dropped = set(new[max(0, room) :])
                missing = [h for h in missing if h not in dropped]
            waits = waits[: max(0, wait_room)]
        if waits:
            deadline = now + min(peer.timeout, limits.DEFER_MS)  # within the sync's progress timeout (30 s by default)
            self._deferred.extend((h, job, ttl, channel, deadline) for h in waits)
            job.outstanding += len(waits)
            peer.deferred += len(waits)
        if channel is not None:
            # A delete of posts this store never held is listed where the peer listed it.
            if held:
                with peer.ingesting_from(self):  # it listed them: it holds them, nothing goes back to it
                    store.learn_listing(channel, held)
            for h in missing:
                peer.note_listed(h, channel, also=False)  # (asked again, ``force``: it keeps the channels it was listed in)
        per = limits.HASHES_PER_POST_REQUEST
        for i in range(0, len(missing), per):
            chunk = tuple(missing[i : i + per])
            peer.add_in_flight(chunk)
            job.posts_requested += len(chunk)
            job.outstanding += 1
            self._queue.append((chunk, job, ttl))
        self._send_queued(now)
        return fits

    def settle_deferred(self, now: int) -> None:
        """The deferred hashes (listed while another request had them in flight): each waits
        until that request delivered it or ended, or ``DEFER_MS`` (or the request timeout, if shorter); then the store has
        it, or it is asked for on this connection.  So a peer that lists a hash and never
        sends it (or trickles its answer) cannot keep it from another peer's sync, which would
        otherwise end "complete" without the post.  Called on every tick and sync poll."""
        if not self._deferred:
            return
        peer, keep, due = self.state, [], {}
        for item in self._deferred:
            h, job, ttl, channel, deadline = item
            if peer.in_flight(h) and now < deadline:
                keep.append(item)
            else:
                due.setdefault((id(job), ttl, channel), (job, []))[1].append(h)
        self._deferred = keep
        for (_, ttl, channel), (job, hashes) in due.items():
            job.outstanding -= len(hashes)
            peer.deferred -= len(hashes)
            try:
                self._request_missing(hashes, job, now, ttl, channel, force=True)
            except CableError as exc:  # the store (closed, damaged): this job fails, the others go on
                job.fail(f"store: {type(exc).__name__}: {exc}")

    def drop_deferred(self, reason: str, tag: object = None) -> None:
        """Forget the deferred hashes (of the jobs tagged ``tag`` only, if given), failing their jobs
        with ``reason``: the connection closed, or the sync waiting for them was given up."""
        keep = []
        for item in self._deferred:
            job = item[1]
            if tag is not None and job.tag is not tag:
                keep.append(item)
                continue
            job.outstanding -= 1
            self.state.deferred -= 1
            job.fail(reason)
        self._deferred = keep

    def _send_queued(self, now: int) -> None:
        """Send queued post requests while fewer than POST_REQUESTS_IN_FLIGHT are unanswered."""
        while self._queue and self._posts_in_flight < limits.POST_REQUESTS_IN_FLIGHT and not self.closed:
            chunk, job, ttl = self._queue.popleft()
            self._posts_in_flight += 1
            self._track(PostRequest(self.new_req_id(), chunk, ttl=ttl), now, job, wanted=chunk, counted=True)

    def _drop_queue(self) -> None:
        while self._queue:
            chunk, job, _ = self._queue.popleft()
            self.state.forget(chunk)
            job.outstanding -= 1
            job.fail("closed: the connection closed before these posts were asked for")

    def _conclude_outbound(self, entry: Outbound, reason: str) -> None:
        peer = self.state
        if peer.requests.get(entry.req_id) is not entry:
            return
        del peer.requests[entry.req_id]
        self.outbound.pop(entry.req_id, None)
        peer.forget(entry.wanted)
        job = entry.job
        job.outstanding -= 1
        if reason != "answered":
            job.fail(f"{reason}: {type(entry.request).__name__} {self._what(reason)}")
        elif entry.wanted:
            job.fail(f"missing: {len(entry.wanted)} posts asked for did not come")
        else:
            job.answered += 1
        if not isinstance(entry.request, PostRequest):
            job.concluded = True
        else:
            self._posts_in_flight -= 1
        self._events.append(Concluded(entry.req_id, entry.request, reason, job.channels))

    def _what(self, reason: str) -> str:
        return {
            "timeout": f"got no answer within {self.state.timeout} ms",
            "closed": "was open when the connection closed",
            "cancelled": "was cancelled",
            "overflow": "listed more posts than this peer waits on at once",
            "ignored": "was not answered (the peer ignores it)",
        }.get(reason, "failed")

    def _handle_answer(self, entry: Outbound, m, now: int) -> None:
        job, request = entry.job, entry.request
        if isinstance(m, HashResponse) and isinstance(request, (TimeRangeRequest, ChannelStateRequest, ModerationStateRequest, StateChangesRequest)):
            if m.hashes:
                entry.started = now
                if isinstance(request, TimeRangeRequest):
                    job.newest = job.newest or m.hashes[0]
                    job.oldest = tuple(m.hashes[-16:])  # newest first: the last hashes are the oldest so far
                job.hashes_seen += len(m.hashes)
                channel = request.channel if isinstance(request, TimeRangeRequest) else None
                if not self._request_missing(list(m.hashes), job, now, request.ttl, channel):  # fetch along the same route
                    self._send(CancelRequest(self.new_req_id(), cancel_id=entry.req_id))
                    self._conclude_outbound(entry, "overflow")
            else:
                self._conclude_outbound(entry, "answered")
        elif isinstance(m, PostResponse) and isinstance(request, PostRequest):
            self._stage(entry, m.posts, now)
            entry.started = now  # answers are arriving: time out from the last one
            if m.concludes or not entry.wanted:
                self._conclude_outbound(entry, "answered")
                if not m.concludes:
                    self.state.expect_closing(entry.req_id, self)
                self._send_queued(now)
        elif isinstance(m, ReconcileResponse) and isinstance(request, ReconcileRequest):
            job.reply = m.message
            self._conclude_outbound(entry, "answered")
        elif isinstance(m, ChannelListResponse) and isinstance(request, ChannelListRequest):
            job.channels = m.channels
            self._conclude_outbound(entry, "answered")
        else:
            error = UnknownRequestError(f"{type(m).__name__} does not answer a {type(request).__name__}")
            job.fail(f"wrong answer type: {error}")
            self._conclude_outbound(entry, "wrong type")
            self._send_queued(now)
            raise error

    def _stage(self, entry: Outbound, posts, now: int) -> None:
        """Take the posts of a response to ``entry``: those asked for are staged, the rest refused."""
        solicited, listed = [], []
        peer = self.state
        for buf in posts:
            h = post_hash(buf)
            if h in entry.wanted:
                entry.wanted.discard(h)
                channels = peer.listed_in(h)
                if channels and post_type_of(buf) == DELETE:  # only a post/delete learns a channel from its listing
                    listed.extend((channel, h) for channel in channels)
                peer.forget((h,))
                solicited.append(buf)
            else:
                self.stats["unsolicited"] += 1
                self._refuse(UnsolicitedPostError(f"post {h.hex()} was not asked for"))
        entry.job.posts_received += len(solicited)
        if solicited:
            self._staged.append((entry, solicited, listed))
            self._staged_bytes += sum(map(len, solicited))
            if self._staged_bytes >= limits.STAGED_BYTES:
                self.flush_staged(now)

    def flush_staged(self, now: int) -> None:
        """Store the staged posts in one ``ingest_many``, with what the listings taught the post/deletes among them.
        A store that cannot take them (closed, disk full) fails every request they answered, and raises."""
        staged, self._staged, self._staged_bytes = self._staged, [], 0
        if not staged:
            return
        peer = self.state
        try:
            with peer.ingesting_from(self):  # the live pushes its commits make skip this connection
                results = peer.store.ingest_many(
                    [buf for _, posts, _ in staged for buf in posts], listings=[pair for _, _, learned in staged for pair in learned]
                )
        except CableError as exc:
            for entry, _, _ in staged:
                entry.job.fail(f"store: {type(exc).__name__}: {exc}")
                self._conclude_outbound(entry, "store")
            self._send_queued(now)
            raise
        at = 0
        for entry, posts, _ in staged:
            for result in results[at : at + len(posts)]:
                if result.ok:
                    self.stats["ingested"] += 1
                else:
                    self.stats["refused"] += 1
                    entry.job.fail(f"refused: a post did not pass the store's checks: {type(result.error).__name__}: {result.error}")
                    self._refuse(result.error)
            at += len(posts)
