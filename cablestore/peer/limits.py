"""The resource policy of a peer: what one remote peer, and all of them
together, may hold of this process (modelled on libp2p's resource manager:
a *system* scope and a *peer* scope, each with limits on memory, streams and
connections; and on nginx's ``limit_conn`` and HTTP/2 flow control).

:class:`PeerLimits` holds the numbers, all settable (``cablestore serve
--max-connections``, ``--memory-mb``, ...).  What each limit does when it is
reached:

* **connections** (system): a connection beyond ``max_connections`` is
  closed as soon as it is accepted.
* **memory** (system and peer): every connection may buffer a small
  *reserved* share of input (``input_reserved``) and output
  (``output_reserved``) at any time; beyond it, buffers come out of one
  shared *pool* (see :meth:`PeerLimits.pool_bytes`).  A connection whose
  input is over its share while the pool is spent is not read from; one
  whose output is over its share is not worked for (*backpressure*: its
  requests wait in its own input, then in the kernel's socket buffers); output
  that cannot wait (a live push, a relayed response) closes a connection
  that already holds ``output_max`` unread bytes, or its share while the pool
  is spent.
* **requests** (peer, then system): live requests beyond
  ``live_per_peer`` (or beyond ``live_total`` for all peers, once a peer
  holds its ``live_reserved``) are refused: concluded at once with an empty
  response and counted.  Forwarding (``ttl > 0``) likewise, except that a
  refused forward is still answered from the local store.  Finite requests
  are never refused: they are work, answered in turn.
* **time**: a connection that sends nothing and has nothing open for
  ``idle_timeout`` ms, that takes longer than ``frame_timeout`` ms to
  deliver one message, or that reads none of its pending output for
  ``stall_timeout`` ms is closed.
* **work**: connections take turns (round robin); a turn is at most
  ``slice_units`` units (one message handled, or one page of a long answer),
  so a burst from one connection delays another's answer by at most one
  turn of each busy connection.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from cablestore.errors import PolicyError

MIB = 1 << 20
KIB = 1 << 10
# What the process needs besides the peer's buffers: the interpreter and the
# store (LevelDB's block cache and memtable), measured about 35 MB for
# `cablestore serve` on an idle store; the rest of the margin is headroom.
BASE_BYTES = 96 * MIB
# The block cache a peer process (`serve`, `sync`) opens its store with: counted
# in BASE_BYTES, so smaller than an embedding program's default (Store's 128 MB).
STORE_CACHE_MB = 32
# The most one connection holds outside the pool: its reserved input and
# output, one read, one unit of answer, the transport's write buffer and
# the objects of the connection itself.
CONNECTION_BYTES = 320 * KIB


@dataclass(frozen=True)
class PeerLimits:
    """The limits of one peer (a :class:`cablestore.peer.protocol.Node`); times in ms.

    The defaults protect a small machine: 256 connections in 256 MB.
    """

    max_connections: int = 256
    memory_mb: int = 256
    live_per_peer: int = 1024
    live_reserved: int = 16
    live_total: int = 4096
    forwards_per_peer: int = 64
    forwards_reserved: int = 4
    forwards_total: int = 1024
    forward_fanout: int = 16
    active_per_peer: int = 4
    slice_units: int = 4
    idle_timeout: int = 120_000
    frame_timeout: int = 20_000
    stall_timeout: int = 20_000
    request_timeout: int = 30_000
    input_reserved: int = 16 * KIB
    output_reserved: int = 64 * KIB
    output_high: int = 256 * KIB
    output_max: int = 4 * MIB
    read_chunk: int = 64 * KIB
    hashes_per_page: int = 512
    posts_per_page: int = 64
    pending_hashes: int = 0  # hashes we wait on at most (0: from the memory budget)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise PolicyError(f"{f.name} must be a non-negative integer, got {value!r}")
        for name in ("max_connections", "memory_mb", "active_per_peer", "slice_units", "read_chunk", "hashes_per_page", "posts_per_page"):
            if getattr(self, name) < 1:
                raise PolicyError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.pool_bytes() < 4 * MIB:
            need = (BASE_BYTES + 4 * MIB + self.max_connections * CONNECTION_BYTES + MIB - 1) // MIB
            raise PolicyError(f"memory_mb {self.memory_mb} is too small for {self.max_connections} connections: at least {need} is needed")

    def pool_bytes(self) -> int:
        """The shared pool of buffer bytes: the budget less the base and every connection's reserved share."""
        return self.memory_mb * MIB - BASE_BYTES - self.max_connections * CONNECTION_BYTES

    def max_pending_hashes(self) -> int:
        """How many hashes we may wait on (queued or asked for) at once: ``pending_hashes``, or half the pool at 512 bytes each."""
        return self.pending_hashes or max(4096, self.pool_bytes() // 2 // 512)


DEFAULT_POLICY = PeerLimits()
