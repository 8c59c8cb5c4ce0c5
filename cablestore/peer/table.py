"""The request table of a peer: what it was asked (:class:`Inbound`), what it
asked (:class:`Outbound`), the :class:`Job` a sync tracks, the events a
connection reports, and the limits every answer keeps to."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cablestore.errors import CableError

if TYPE_CHECKING:
    from cablestore.peer.protocol import Connection

HASHES_PER_RESPONSE = 4096
POST_RESPONSE_BYTES = 256 << 10
HASHES_PER_POST_REQUEST = 1024
POST_REQUESTS_IN_FLIGHT = 4  # per connection; more wait in a queue, so none times out unanswered in our buffer


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


@dataclass(eq=False)
class Inbound:
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
class Outbound:
    """A request this peer sent on ``conn``."""

    req_id: bytes
    conn: Connection
    request: object
    started: int
    job: Job
    live: bool = False
    wanted: set = field(default_factory=set)
