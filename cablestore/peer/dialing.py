"""Keeping a connection to a peer we know: when to dial again after a failure or a drop (sans-I/O).

A node that dials its peers (``serve --peer HOST:PORT``, ``run_server(...,
peers=[...])``, ``Peer.connect(..., reconnect=True)``) must come back by
itself when a connection or the peer goes away, without hammering a peer
that is down nor every node reconnecting at the same instant.  A
:class:`Backoff` gives the wait before each attempt: ``base`` doubled after
each failure up to ``cap``, each wait drawn uniformly from its upper half
("equal jitter"), so a peer that is down costs at most one attempt per
interval and nodes restarted together spread out.  A connection that stayed
up for ``stable`` seconds resets it: the next drop is retried after ``base``.
"""

from __future__ import annotations

import random as _random
from dataclasses import dataclass, field

from cablestore.errors import ArgumentError
from cablestore.peer.limits import CONNECT_TIMEOUT, DIAL_BASE, DIAL_CAP, DIAL_STABLE


@dataclass
class Backoff:
    """The waits between attempts to reach one peer."""

    base: float = DIAL_BASE
    cap: float = DIAL_CAP
    stable: float = DIAL_STABLE
    random: _random.Random = field(default_factory=_random.Random)
    failures: int = 0  # attempts failed (or connections dropped before ``stable``) since the last stable one

    def __post_init__(self) -> None:
        if not (0 < self.base <= self.cap) or self.stable <= 0:
            raise ArgumentError(f"backoff needs 0 < base <= cap and stable > 0, not base={self.base}, cap={self.cap}, stable={self.stable}")

    def next_wait(self) -> float:
        """Seconds to wait before the next attempt, after one more failure."""
        ceiling = min(self.cap, self.base * (2 ** min(self.failures, 32)))
        self.failures += 1
        return ceiling / 2 + self.random.random() * ceiling / 2

    def connected_for(self, seconds: float) -> None:
        """A connection ended after ``seconds``: long enough, and the next attempt comes soon again."""
        if seconds >= self.stable:
            self.failures = 0


__all__ = ["Backoff", "CONNECT_TIMEOUT"]
