"""Set reconciliation between cablestore peers (docs/reconcile.md): the probe and one channel's exchange, the initiator's side.

A sync that meets a peer speaking the extension settles each channel with
two reconciliations, its history (the ``!chat`` rows a time range request
from 0 lists, fingerprinted from the store's ``!recon`` range sums in
O(log n) rows) and its state (the hashes a channel state request answers),
instead of listing every hash: a channel both sides hold alike costs one
round trip of about 40 bytes each way.  The hashes only the peer holds are
then fetched with post requests like any listed hash; those only this side
holds are left to the peer's own pull.  Anything that goes wrong (a refusal,
a malformed or lying answer, a timeout, more than ``MAX_ROUNDS`` rounds)
falls back to native requests for that channel, so a lying peer can make a
sync longer, never wrong.

Sans-I/O as the rest of :mod:`cablestore.peer`: :class:`Probe` and
:class:`ChannelReconcile` issue requests on a connection and advance when
the sync polls them.  The answering side is the connection's
(``Serving._reconciled``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from cablestore.errors import CableError, ReconcileError
from cablestore.peer import limits
from cablestore.peer.serving import state_items
from cablestore.peer.table import Job
from cablestore.wire import reconcile
from cablestore.wire.messages import SCOPE_HISTORY, SCOPE_STATE

VERSION = bytes((reconcile.VERSION,))
SCOPES = (SCOPE_HISTORY, SCOPE_STATE)


def holds_history(store: Any, channel: str) -> bool:
    """Whether the store holds any of the channel's history (a ``!chat`` row), from its range sums."""
    with store.range_items(channel) as items:
        return len(items) > 0


# --- the probe ---------------------------------------------------------------------------------------------
class Probe:
    """Whether the peer speaks the extension: a probe request sent before the channel list request.

    Hosts answer in order and a host ignores a message type it does not know
    (wire.md §6.3.1), so a channel list answer that arrives before the probe's
    means the peer ignores it: :attr:`result` is then False at once; with no
    answer at all, after ``limits.PROBE_WAIT`` ms.
    """

    def __init__(self, conn: Any, now: int, tag: object) -> None:
        self.conn = conn
        self.sent_at = now
        self.job = conn.request_reconcile("", SCOPE_HISTORY, b"", now=now, job=Job(tag=tag))
        self.result: bool | None = None

    def poll(self, now: int, listed: bool) -> bool | None:
        """True (it speaks it), False (native requests only) or None (not known yet)."""
        if self.result is None:
            if self.job.done:
                self.result = not self.job.failed and (self.job.reply or b"")[:1] == VERSION
            elif listed or now - self.sent_at > limits.PROBE_WAIT:
                self.result = False
                self.conn.drop_request(self.job)
        return self.result


# --- one channel ----------------------------------------------------------------------------------------------
class ChannelReconcile:
    """One channel's history and state reconciled with the peer, then the posts only the peer holds fetched.

    ``done`` once both scopes agreed and their posts came (``complete``), or
    one of them failed (``fallback``: ask natively).  ``page``: hashes asked
    for at once (the pending-hash bound is shared with every other sync).
    """

    def __init__(self, conn: Any, channel: str, now: int, tag: object, page: int) -> None:
        self.conn, self.channel, self.tag, self.page = conn, channel, tag, page
        self.store = conn.state.store
        self.initiators: dict[int, reconcile.Initiator] = {}
        self.jobs: dict[int, Job] = {}
        self.need: dict[int, list[bytes]] = {}
        self.fetches: list[Job] = []
        self.fallback: str | None = None
        self.sent = self.received = 0
        for scope in SCOPES:
            self._start(scope, now)

    @contextmanager
    def _items(self, scope: int) -> Iterator[Any]:
        """The scope's items as they are now (the history's over a store snapshot held while the block runs)."""
        if scope == SCOPE_STATE:
            yield state_items(self.store, self.channel)
            return
        with self.store.range_items(self.channel) as items:
            yield items

    def _start(self, scope: int, now: int) -> None:
        init = self.initiators[scope] = reconcile.Initiator(reconcile.Items(()))
        with self._items(scope) as init.items:
            message = init.start()
        self._ask(scope, message, now)

    def _ask(self, scope: int, message: bytes, now: int) -> None:
        self.sent += len(message)
        self.jobs[scope] = self.conn.request_reconcile(self.channel, scope, message, now=now, job=Job(tag=self.tag))

    def poll(self, now: int) -> None:
        """Advance each scope's exchange by the answers that came; fetch what the peer alone holds."""
        if self.fallback is not None:
            return
        for scope, job in list(self.jobs.items()):
            if not job.done:
                continue
            del self.jobs[scope]
            if job.failed or not job.reply:
                self.fallback = job.reason or "the peer refused the reconciliation"
                return
            self.received += len(job.reply)
            init = self.initiators[scope]
            try:
                with self._items(scope) as init.items:  # each round over the items as they are then
                    message = init.receive(job.reply)
            except ReconcileError as exc:
                self.fallback = f"reconciliation: {exc}"
                return
            if message is not None:
                self._ask(scope, message, now)
            else:
                self.need[scope] = sorted(init.need)
        self._fetch(now)

    def _fetch(self, now: int) -> None:
        """The hashes the peer alone holds, ``page`` at a time (each page once the previous one came)."""
        if any(not f.done for f in self.fetches):
            return
        for scope in SCOPES:
            hashes = self.need.get(scope)
            if hashes:
                chunk, self.need[scope] = hashes[: self.page], hashes[self.page :]
                channel = self.channel if scope == SCOPE_HISTORY else None  # a delete is listed where the peer listed it
                try:
                    self.fetches.append(self.conn.request_posts(chunk, now=now, job=Job(tag=self.tag), channel=channel))
                except CableError as exc:
                    self.fallback = f"store: {type(exc).__name__}: {exc}"
                return

    @property
    def round_trips(self) -> int:
        """Round trips of its longer exchange (history and state run side by side)."""
        return max(init.rounds for init in self.initiators.values())

    @property
    def done(self) -> bool:
        """Both scopes settled and their posts came, or it fell back."""
        if self.fallback is not None:
            return True
        return not self.jobs and len(self.need) == len(SCOPES) and not any(self.need.values()) and all(f.done for f in self.fetches)

    @property
    def complete(self) -> bool:
        """Done without falling back, and every post asked for came and was taken."""
        return self.done and self.fallback is None and all(f.complete for f in self.fetches)

    def all_jobs(self) -> list[Job]:
        """Its jobs (the open exchanges and the fetches), for the sync's progress and summary."""
        return [*self.jobs.values(), *self.fetches]
