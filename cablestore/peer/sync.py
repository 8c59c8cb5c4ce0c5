"""Syncing with one remote peer: channel list, then each channel's history and state.

:class:`Sync` is sans-I/O like :mod:`cablestore.peer`: it issues requests on
a :class:`cablestore.peer.protocol.Connection` and advances each time the transport
calls :meth:`Sync.poll`.  It keeps a cursor per remote peer and channel under
``!local!sync!`` (see KEYSPACE.md): the timestamp of the newest post of the
last complete history fetch (the time it was asked, when the peer held
nothing of the channel), less ``margin`` ms for clock skew, so a repeated
sync asks only for ``[cursor, ...)``; the peer is its user once the Cable
Handshake authenticated one the store knows (:attr:`Sync.cursor_key`).  A channel is synced by one
:class:`Sync` of a node at a time (``PeerState.syncing``); others wait for it, up
to ``CHANNEL_WAIT`` ms (a hostile peer can hold its sync open for as long as
it trickles posts), then fetch it beside it: a hash the other sync has in
flight is then waited for, not asked for twice, for a while
(``Connection.settle_deferred``).

A sync never calls a failure complete: it ends with a ``reason`` when the
peer closes, breaks the framing, answers with the wrong message type or
with bytes that do not decode, lists more than it may hold, or brings
nothing useful (an answer, a post) for ``progress_timeout`` ms; its
:meth:`Sync.summary` says what was asked, received and refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from cablestore.keyspace.keys import WEEK_MS, canonical_channel
from cablestore.peer import cursors, history, limits, syncreport
from cablestore.peer.limits import DEFAULT_MARGIN, DEFAULT_PROGRESS_TIMEOUT, PARALLEL_CHANNELS
from cablestore.peer.protocol import Connection
from cablestore.peer.reconciling import ChannelReconcile, Probe, holds_history
from cablestore.peer.table import Job


class _Channel:
    """One channel (its casefolded key) and the spellings it is asked for under."""

    def __init__(self, name: str, spellings: Iterable[str] = ()):
        self.name = name
        self.spellings: list[str] = list(dict.fromkeys(spellings)) or [name]
        self.jobs: dict[str, tuple[Job, Job]] | None = None  # spelling -> (time range, state), once asked
        self.pages: dict[str, list[tuple[Job, int]]] = {}  # spelling -> its further pages of history (job, end), in order
        self.live: list[Job] = []
        self.finished = False
        self.waiting_since: int | None = None  # when it found another sync holding the channel
        self.asked_at: int | None = None  # when its history and state were asked for
        self.recon: ChannelReconcile | None = None  # its reconciliation, with a peer that speaks it

    @property
    def asked(self) -> bool:
        return self.jobs is not None

    @property
    def reconciled(self) -> bool:
        """Settled by reconciliation (no native request asked)."""
        return self.recon is not None and self.recon.fallback is None

    @property
    def answered(self) -> bool:
        return self.jobs is not None and (not self.reconciled or self.recon.done) and all(j.done for j in self.finite_jobs())

    @property
    def complete(self) -> bool:
        return self.jobs is not None and all(j.complete for j in self.finite_jobs())

    def finite_jobs(self) -> list[Job]:
        own = self.recon.all_jobs() if self.reconciled else []
        return own + [j for pair in (self.jobs or {}).values() for j in pair] + [j for pages in self.pages.values() for j, _ in pages]


class Sync:
    """Pull a remote peer's channels into the store.

    ``channels``: names to sync (None: all the peer lists); ``also``:
    channels to ask for besides those the peer lists, or a function giving
    them once the list came (``serve`` pulls the channels either side
    knows); ``window``:
    ``(start, end)`` ms to fetch instead of ``[cursor, now + 7 days)`` (an
    explicit window leaves the cursor alone); ``live``: afterwards keep live
    time range and state requests open.  ``progress_timeout``: ms without an
    answer or a post after which a finite sync gives up.  ``done`` once every
    request concluded, or the sync was abandoned (``reason`` says why).

    Channel names are case-insensitive (spec 5.4.1) but deployed peers
    (cable-core.js 0.2.1) compare them exactly: a channel is asked for under
    every spelling the peer lists for it (and the one given), and what comes
    is stored under the casefolded key.  The channel list is always asked
    for, also with ``channels``, to learn those spellings.
    """

    def __init__(
        self,
        conn: Connection,
        peer: str,
        *,
        channels: Iterable[str] | None = None,
        also: Iterable[str] | Callable[[], Iterable[str]] = (),
        live: bool = False,
        window: tuple[int, int] | None = None,
        margin: int = DEFAULT_MARGIN,
        progress_timeout: int = DEFAULT_PROGRESS_TIMEOUT,
        parallel: int = PARALLEL_CHANNELS,
    ) -> None:
        self.conn = conn
        self.state = conn.state  # what the connections of its node share (the lock, the store, the channels syncing)
        self.peer = peer
        self.live = live
        self.window = window
        self.margin = margin
        self.progress_timeout = progress_timeout
        self.parallel = parallel
        self.wanted: dict[str, list[str]] | None = None  # casefolded -> spellings given
        if channels is not None:
            self.wanted = {}
            for c in channels:
                self.wanted.setdefault(canonical_channel(c), []).append(c)
        self.also = also if callable(also) else list(also)
        self.channels: dict[str, _Channel] = {}
        self.listing: Job | None = None  # the channel list request (of its last page)
        self._pages: list[str] = []  # the channels of the full pages before it
        self.probe: Probe | None = None  # whether the peer speaks set reconciliation (docs/reconcile.md)
        self.fallbacks: dict[str, str] = {}  # channels whose reconciliation failed, and why (then asked natively)
        self.moderation: Job | None = None  # the moderation state request (message type 8), once the channels are known
        self.moderation_live: Job | None = None
        self.started = False
        self.reason: str | None = None
        self.ended_by_close = False  # it ended because the connection closed, not because it gave up first
        self._progress_mark: tuple = ()
        self._progress_at: int | None = None
        self._listed = False
        self.unlisted: list[str] = []  # channels named that the peer's channel list lacks
        self.not_live: list[str] = []  # channels synced once but not kept live (past MAX_LIVE_CHANNELS)
        self._live_channels = 0

    # --- driving ------------------------------------------------------------------
    def poll(self, now: int) -> None:
        """Advance: start what can start, finish what concluded, give up when nothing useful came for too long."""
        with self.state.lock:
            if self.reason is not None:
                return
            if not self.started:
                self.started = True
                self._progress_at = now
                if self.state.policy.reconcile and self.window is None:  # before the list: answers come in order
                    self.probe = Probe(self.conn, now, tag=self)
                self.listing = self.conn.request_channel_list(0, limits.CHANNELS_PER_RESPONSE, now=now, job=Job(tag=self))
            if not self.conn.closed:
                self.conn.settle_deferred(now)
            if self.conn.closed:
                if self.conn.error is not None or not self.finite_done:
                    self.ended_by_close = self.reason is None
                    self.abandon(self._closed_reason())
                return
            if self.listing is not None and self.listing.done and not self._listed:
                full = self.listing.complete and len(self.listing.channels) >= limits.CHANNELS_PER_RESPONSE
                if full and len(self._pages) + len(self.listing.channels) < limits.MAX_LISTED_CHANNELS:
                    # A full page: the peer may list more (a cablestore peer answers 4,096 at a time).
                    self._pages += self.listing.channels
                    self.listing = self.conn.request_channel_list(len(self._pages), limits.CHANNELS_PER_RESPONSE, now=now, job=Job(tag=self))
                    return
                if full and self.wanted is None:
                    self.abandon(f"channel list: the peer lists more than {limits.MAX_LISTED_CHANNELS} channels")
                    return
                if not self.listing.complete and self.wanted is None:
                    self.abandon(f"channel list: {self.listing.reason}")
                    return
                self._add_listed(self._pages + list(self.listing.channels) if self.listing.complete else ())
                self._listed = True
            self._ask_moderation(now)
            running = 0
            for ch in self.channels.values():
                if ch.asked and not ch.finished:
                    running += 1
            for ch in self.channels.values():
                if not ch.asked and running >= self.parallel:
                    break
                started = not ch.asked
                self._advance(ch, now)
                running += started and ch.asked
            self._ask_moderation(now)  # again: the channels may have finished just now (else it waits for the next event)
            failed = self._live_failure()
            if failed:
                self.abandon(failed)
                return
            self._check_progress(now)

    def _ask_moderation(self, now: int) -> None:
        """Once the channels are in: every block and unblock, and the roles and actions for these channels and the
        cabal (§5.2.1.1), applied to what is held; then, live, its changes."""
        if self.moderation is None and self._listed and all(ch.finished for ch in self.channels.values()):
            self.moderation = self.conn.request_moderation_state(self._spellings(), 0, 0, now=now, job=Job(tag=self))
        if self.live and self.moderation_live is None and self.moderation is not None and self.moderation.done and not self.conn.closed:
            self.moderation_live = self.conn.request_moderation_state(self._spellings(), 1, 0, now=now, job=Job(tag=self))

    def _check_progress(self, now: int) -> None:
        jobs = self._jobs()
        # Useful: a request answered, a post received.  Hashes alone are not (a peer can list
        # hashes forever and deliver no post), nor a request that failed.
        mark = (sum(j.posts_received for j in jobs), sum(j.concluded and not j.failed for j in jobs))
        if mark != self._progress_mark:
            self._progress_mark, self._progress_at = mark, now
        elif not self.finite_done and now - self._progress_at > self.progress_timeout:
            asked = sum(1 for j in jobs if not j.done)
            dropped = ", ".join(f"{n} {name}" for name, n in self.conn.errors.most_common(3))
            first = next((j.reason for j in jobs if j.failed and j.reason), None)
            self.abandon(
                f"no progress for {self.progress_timeout / 1000:g} s: {asked} requests unanswered; the peer sent "
                f"{self.conn.stats['received']} messages ({self.conn.stats['requests']} requests), {self.conn.stats['dropped']} dropped"
                + (f" ({dropped})" if dropped else "")
                + (f"; before that: {first}" if first else "")
            )

    def _add_listed(self, listed) -> None:
        """The channels to sync, each with the spellings to ask for: every one the peer listed, and the one given."""
        spellings: dict[str, list[str]] = {}
        for c in listed:
            spellings.setdefault(canonical_channel(c), []).append(c)
        if self.wanted is not None and self.listing is not None and self.listing.complete:
            self.unlisted = sorted(name for name in self.wanted if name not in spellings)
        if self.wanted is not None:
            names = {name: given + spellings.get(name, []) for name, given in self.wanted.items()}
        else:
            names = dict(spellings)
            for c in self.also() if callable(self.also) else self.also:
                names.setdefault(canonical_channel(c), [c])
        for name, spelled in names.items():
            self.channels.setdefault(name, _Channel(name, spelled))

    def learn(self, spelling: str) -> bool:
        """Sync one more channel, spelled as the peer spells it (one it asked us about); True if it is new."""
        if self.wanted is not None or not self._listed:
            return False  # a sync of named channels keeps to them; before the listing, the listing decides
        name = canonical_channel(spelling)
        if name in self.channels:
            return False
        self.channels[name] = _Channel(name, [spelling])
        return True

    def _spellings(self) -> list[str]:
        return sorted({s for ch in self.channels.values() for s in ch.spellings})

    def _advance(self, ch: _Channel, now: int) -> None:
        if ch.finished:
            return
        if not ch.asked:
            if ch.name in self.state.syncing:
                if ch.waiting_since is None:
                    ch.waiting_since = now
                if now - ch.waiting_since < min(limits.CHANNEL_WAIT, self.progress_timeout // 2):
                    return  # another sync holds this channel: wait for it, a while
            self.state.syncing[ch.name] = self.state.syncing.get(ch.name, 0) + 1
            ch.asked_at = now
            if self._reconciles(ch.name, now):
                if self.live and self._live_channels < limits.MAX_LIVE_CHANNELS:
                    # What changes from before the reconciliation on, so nothing falls between the two; its chat
                    # whatever the timestamp (no first answer to bound: a post written offline still comes).
                    self._live_channels += 1
                    ch.live.append(self.conn.request_chat_changes(ch.name, 0, now=now, job=Job(tag=self)))
                    ch.live.append(self.conn.request_state_changes(ch.name, now=now, job=Job(tag=self)))
                ch.recon, ch.jobs = ChannelReconcile(self.conn, ch.name, now, self, self.page), {}
            else:
                self._ask_natively(ch, now)
            return
        if ch.recon is not None and not ch.jobs:
            ch.recon.poll(now)
            if ch.recon.fallback is not None:  # a refusal, a malformed or lying answer, a timeout: list it natively
                self.fallbacks[ch.name] = ch.recon.fallback
                self._ask_natively(ch, now)
                return
        if not ch.answered:
            return
        if self._next_pages(ch, now):
            return
        ch.finished = True
        self._release(ch.name)
        if ch.complete and self.window is None:
            cursor = ch.asked_at - self.margin if ch.reconciled else self._cursor(ch)  # reconciled: it held all we lacked
            if cursor is not None:
                self.state.store.set_sync_cursor(self.cursor_key, ch.name, cursor)
        if self.live and not self.conn.closed and not ch.live:  # (reconciled: its changes are asked for already)
            if self._live_channels >= limits.MAX_LIVE_CHANNELS:
                self.not_live.append(ch.name)
                return
            self._live_channels += 1
            for spelling in ch.spellings:
                ch.live.append(self.conn.request_time_range(spelling, max(0, now - self.margin), 0, 0, now=now, job=Job(tag=self)))
                ch.live.append(self.conn.request_state(spelling, 1, now=now, job=Job(tag=self)))

    def _reconciles(self, name: str, now: int) -> bool:
        """Reconcile the channel: the peer speaks it, no window was asked, and this store holds some of its history
        (holding none, it would be told every hash, as native requests do, but without their paging)."""
        speaks = self.probe is not None and self.probe.poll(now, listed=True)
        return bool(speaks) and self.window is None and holds_history(self.state.store, name)

    def _ask_natively(self, ch: _Channel, now: int) -> None:
        """The channel's history (from its cursor, or the window) and state, by native requests, under every spelling."""
        start, end = self.window or (self._stored_cursor(ch.name), now + WEEK_MS)
        ch.jobs = {
            spelling: (
                self.conn.request_time_range(spelling, start, end, self.page, now=now, job=Job(tag=self)),
                self.conn.request_state(spelling, 0, now=now, job=Job(tag=self)),
            )
            for spelling in ch.spellings
        }

    @property
    def page(self) -> int:
        """Hashes a history request asks for at most (:func:`cablestore.peer.history.page_size`)."""
        return history.page_size(self.state.policy, self.parallel)

    def _next_pages(self, ch: _Channel, now: int) -> bool:
        return history.next_pages(self, ch, now)

    @property
    def cursor_key(self) -> str:
        """The name this peer's cursors are kept under (:func:`cablestore.peer.cursors.cursor_key`)."""
        return cursors.cursor_key(self.conn, self.peer)

    def _stored_cursor(self, channel: str) -> int:
        return cursors.stored_cursor(self.state.store, self.cursor_key, self.peer, channel)

    def _cursor(self, ch: _Channel) -> int | None:
        return cursors.next_cursor(self.state.store, [job for job, _ in ch.jobs.values()], ch.asked_at, self.margin)

    def _release(self, name: str) -> None:
        holders = self.state.syncing
        if holders.get(name, 0) > 1:
            holders[name] -= 1
        else:
            holders.pop(name, None)

    def _live_failure(self) -> str | None:
        """Why the live requests are no use any more, or None.  A post the store refused (a blocked author's, a
        forgery) was counted and dropped: the peer's later posts still come, so it ends nothing."""
        for ch in self.channels.values():
            for job in ch.live:
                if job.failed and job.reason and not job.reason.startswith(("timeout", "missing", "refused")):
                    return f"live {ch.name}: {job.reason}"
        return None

    def _closed_reason(self) -> str:
        error = self.conn.error
        if error is not None:
            return f"the peer broke the framing: {type(error).__name__}: {error}"
        detail = self.conn.close_detail or f"it closed ({self.conn.close_reason})"
        return f"the connection closed: {detail}; a rerun resumes from the cursor"

    def abandon(self, reason: str = "abandoned") -> None:
        """Give up: cancel what is open, release the channels this sync holds; ``reason`` is kept."""
        with self.state.lock:
            if self.reason is None:
                self.reason = reason
            for ch in self.channels.values():
                if ch.asked and not ch.finished:
                    ch.finished = True
                    self._release(ch.name)
            if not self.conn.closed:
                for entry in [e for e in self.conn.outbound.values() if e.job.tag is self]:
                    self.conn.cancel(entry.req_id)
                self.conn.drop_deferred("cancelled: the sync was given up", tag=self)

    # --- results ------------------------------------------------------------------
    @property
    def finite_done(self) -> bool:
        """True once the listing and every channel's history and state concluded."""
        if not self.started or not self._listed:
            return False
        if self.moderation is None or not self.moderation.done:
            return False
        return all(ch.finished for ch in self.channels.values())

    @property
    def done(self) -> bool:
        """True once every request concluded, or the sync was abandoned or its connection closed."""
        return self.reason is not None or self.conn.closed or self.finite_done

    def _jobs(self) -> list[Job]:
        jobs = [j for ch in self.channels.values() for j in (*ch.finite_jobs(), *ch.live)]
        return jobs + [j for j in (self.listing, self.moderation, self.moderation_live) if j is not None]

    def summary(self) -> dict:
        """What was asked, received and refused, for humans and ``--json``; ``reason`` is None only when complete
        (:func:`cablestore.peer.syncreport.summary`)."""
        return syncreport.summary(self)
