"""The rows of a peer's request table: what it was asked (:class:`Inbound`), what it
asked (:class:`Outbound`), the :class:`Job` a sync tracks, and the events a
connection reports (:class:`Concluded`, :class:`Refused`).  Plain data: the
connection a row belongs to is held, never imported."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cablestore.errors import CableError

MODERATION_LIVE = ("moderation state",)  # where live moderation state requests are indexed: not a channel name


@dataclass(frozen=True)
class Concluded:
    """A request this peer made has concluded (``reason``: answered, cancelled, timeout, closed, malformed, wrong type, overflow)."""

    req_id: bytes
    request: object
    reason: str
    channels: tuple[str, ...] = ()
    reply: bytes | None = None  # a reconcile response's message, once it came


@dataclass(frozen=True)
class Refused:
    """Something the remote peer sent was dropped or refused; ``error`` says why."""

    error: CableError


@dataclass
class Job:
    """A unit of requesting work: one request and the post requests its hashes led to.

    ``done`` once the request concluded and none of its post requests is left;
    ``complete`` if additionally nothing timed out, was cancelled or refused;
    ``reason`` says what went wrong first.
    """

    tag: object = None
    outstanding: int = 0
    concluded: bool = False
    failed: bool = False
    reason: str | None = None
    newest: bytes | None = None  # the first hash of a time range answer: the newest post
    oldest: tuple[bytes, ...] = ()  # the last hashes of a time range answer so far, oldest last (where its next page starts)
    hashes_seen: int = 0
    requests: int = 0  # messages sent for it (the request and its post requests)
    answered: int = 0  # of those, answered whole
    posts_requested: int = 0
    posts_received: int = 0
    channels: tuple[str, ...] = ()

    @property
    def done(self) -> bool:
        """The request concluded and none of its post requests is left."""
        return self.concluded and self.outstanding == 0

    @property
    def complete(self) -> bool:
        """Done, and nothing timed out, was cancelled or refused."""
        return self.done and not self.failed

    def fail(self, reason: str) -> None:
        """Mark the job failed; the first reason is kept."""
        self.failed = True
        if self.reason is None:
            self.reason = reason


@dataclass(eq=False)
class Inbound:
    """A request a remote peer sent us: answered locally and maybe forwarded."""

    req_id: bytes
    origin: Any  # the Connection it came from
    request: object
    started: int
    live: bool = False
    remaining: int | None = None  # hashes still allowed by ``limit``
    pending: set = field(default_factory=set)  # connections it was forwarded to, not concluded yet
    forwarded: set = field(default_factory=set)
    local_done: bool = False
    channel: str | None = None
    state: set = field(default_factory=set)
    answered_size: int = 0  # a live state request: hashes in its last answer (``state`` may hold more while stale)
    stale: bool = False  # a live state request not recomputed since commits of its own peer's posts (see live.py)
    cursor: bytes | None = None  # a time range answered page by page: the key the next page starts below
    holds_live: bool = False  # it counts against the live limits
    holds_forward: bool = False  # it counts against the forwarding limits
    answered: bool = False  # its one response went out already (a channel list): nothing concludes it
    relay_wanted: set | None = None  # a forwarded post request: hashes still to be relayed
    relayed: set | None = None  # a forwarded time range or state request: hashes relayed so far


@dataclass(eq=False)
class Outbound:
    """A request this peer sent on ``conn``."""

    req_id: bytes
    conn: Any  # the Connection it was sent on
    request: object
    started: int
    job: Job
    live: bool = False
    wanted: set = field(default_factory=set)
