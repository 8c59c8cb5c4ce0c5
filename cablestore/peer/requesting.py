"""Requesting from a remote peer: time ranges, channel state, channel lists
and the post requests their hashes lead to, and ingesting the answers.  A
mixin of :class:`cablestore.peer.protocol.Connection`."""

from __future__ import annotations

from collections.abc import Iterable

from cablestore.errors import UnknownRequestError, UnsolicitedPostError
from cablestore.peer.table import HASHES_PER_POST_REQUEST, POST_REQUESTS_IN_FLIGHT, Concluded, Job, Outbound
from cablestore.wire.codec import post_hash
from cablestore.wire.messages import (
    CancelRequest,
    ChannelListRequest,
    ChannelListResponse,
    ChannelStateRequest,
    HashResponse,
    PostRequest,
    PostResponse,
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
            if isinstance(entry, Outbound) and entry.conn is self:
                self._send(CancelRequest(self.node.new_req_id(), cancel_id=req_id))
                self._conclude_outbound(entry, "cancelled")

    def _request(self, make, now: int, job: Job | None, live: bool = False) -> Job:
        job = job or Job()
        with self.node.lock:
            request = make(self.node.new_req_id())
            self._track(request, now, job, live)
        return job

    def _track(self, request, now: int, job: Job, live: bool = False, wanted=(), counted: bool = False) -> None:
        entry = Outbound(request.req_id, self, request, now, job, live, set(wanted))
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

    def _conclude_outbound(self, entry: Outbound, reason: str) -> None:
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

    def _handle_answer(self, entry: Outbound, m, now: int) -> None:
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

    def _ingest(self, entry: Outbound, posts) -> None:
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
