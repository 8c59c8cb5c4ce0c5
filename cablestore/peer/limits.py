"""Every limit of a peer, in one place, each settable or fixed (:data:`LIMITS`; docs/operations.md's
table is :func:`limits_table`, checked by a test).

The resource policy of a peer: what one remote peer, and all of them
together, may hold of this process (modelled on libp2p's resource manager:
a *system* scope and a *peer* scope, each with limits on memory, streams and
connections; and on nginx's ``limit_conn`` and HTTP/2 flow control).

:class:`PeerLimits` holds the settable numbers (``cablestore serve
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
  ``idle_timeout`` ms, that sends no byte of a message it has begun for
  ``frame_timeout`` ms or, past ``frame_timeout`` ms, delivers it slower
  than ``MIN_MESSAGE_RATE`` bytes a second on average, or that reads none of
  its pending output for ``stall_timeout`` ms is closed.  A peer that makes
  progress (bytes arriving at a rate no honest peer falls under, even on a
  loaded machine) is never closed for time.
* **work**: connections take turns (round robin); a turn is at most
  ``slice_units`` units (one message handled, or one page of a long answer),
  so a burst from one connection delays another's answer by at most one
  turn of each busy connection.
"""

from __future__ import annotations

import threading
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
# Threads verifying the signatures of the posts a peer process (serve, sync) ingests, while its event loop
# decodes and indexes (the compiled verifier releases the GIL: the second core verifies).
VERIFY_WORKERS = 1
# The most one connection holds outside the pool: its reserved input and
# output, one read, one unit of answer, the transport's write buffer and
# the objects of the connection itself.
CONNECTION_BYTES = 320 * KIB
# The slowest a message may arrive once it has taken ``frame_timeout`` ms: an
# honest peer sends tens of KB a second even on a loaded machine; a trickle
# below this holds a connection and its buffer for nothing.
MIN_MESSAGE_RATE = 256  # bytes a second


@dataclass(frozen=True)
class PeerLimits:
    """The settable limits of one peer (a :class:`cablestore.peer.Node`); times in ms.

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
    handshake_timeout: int = 10_000
    connections_per_address: int = 0
    connections_per_user: int = 16
    input_reserved: int = 16 * KIB
    output_reserved: int = 64 * KIB
    output_high: int = 256 * KIB
    output_max: int = 4 * MIB
    read_chunk: int = 64 * KIB
    hashes_per_page: int = 512
    posts_per_page: int = 64
    pending_hashes: int = 0  # hashes we wait on at most (0: from the memory budget)
    reconcile: int = 1  # 1: speak set reconciliation (docs/reconcile.md) with peers that do; 0: native requests only, the probe ignored

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise PolicyError(f"{f.name} must be a non-negative integer, got {value!r}")
        if self.reconcile > 1:
            raise PolicyError(f"reconcile must be 0 or 1, got {self.reconcile}")
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


class FairShares:
    """One budget split among ``parties`` so that none can starve another (a listener's cabals).

    Half of ``total`` is reserved, in equal parts (``reserve`` each, at
    least ``least``), and the other half is taken first come: a party may
    always use up to its reserve, and beyond it only what neither the others
    nor their unused reserves hold (:meth:`left`).  So one busy party gets up
    to ``total - (parties - 1) * reserve``, and every other keeps its
    reserve.  ``outside``: units held for no party yet (a socket whose
    handshake has not named its cabal).  Used for a many-cabal listener's
    connections (``max_connections``) and its buffer pool
    (:meth:`PeerLimits.pool_bytes`).
    """

    def __init__(self, total: int, parties: int, *, least: int = 0) -> None:
        if parties < 1:
            raise PolicyError("a budget is shared by at least one party")
        self.total = total
        self.reserve = max(least, total // (2 * parties))
        self.used = [0] * parties
        self.held = self.reserve * parties  # the sum of max(used, reserve) over the parties
        self.outside = 0
        self._lock = threading.Lock()  # buffers are accounted from the ingest thread too

    def left(self, party: int) -> int:
        """How much more ``party`` may use now (negative: over what it may hold).

        Its reserve not in use, whatever the others hold (one over its
        own limit takes nothing of it), and what nobody holds.
        """
        free = self.total - self.outside - self.held
        used = self.used[party]
        return self.reserve - used + max(free, 0) if used < self.reserve else free

    def add(self, party: int, delta: int) -> None:
        """``party`` uses ``delta`` more (or fewer, when negative)."""
        with self._lock:
            used = self.used[party]
            now = used + delta
            self.used[party] = now
            self.held += max(now, self.reserve) - max(used, self.reserve)

    def share(self, party: int) -> PoolShare:
        """``party``'s view of the budget, for a :class:`cablestore.peer.state.PeerState`'s buffer pool."""
        return PoolShare(self, party)


class PoolShare:
    """One party's share of a :class:`FairShares` budget: what a node's buffer pool is when its listener serves many cabals."""

    __slots__ = ("party", "shares")

    def __init__(self, shares: FairShares, party: int) -> None:
        self.shares, self.party = shares, party

    @property
    def left(self) -> int:
        """Bytes this party may still buffer beyond every connection's reserved share."""
        return self.shares.left(self.party)

    def add(self, delta: int) -> None:
        """This party buffers ``delta`` bytes more (or fewer)."""
        self.shares.add(self.party, delta)


# --- fixed limits: sizes the protocol and the machine dictate, not an operator -------------
# Answers (cablestore.peer.serving)
HASHES_PER_RESPONSE = 4096  # hashes in one hash response
CHANNELS_PER_RESPONSE = 4096  # a channel list answer's page: the most a decoder takes in one message (Limits.max_channels)
SPELLINGS_PER_TURN = 128  # channels of a channel list answer spelled in one turn of the connection
POST_RESPONSE_BYTES = 256 << 10  # posts in one post response, at most
POST_PAGE_BYTES = 64 << 10  # posts read for one unit of work on a post request
RELAYED_HASHES = 65_536  # distinct hashes relayed for one forwarded request at most
EVENTS_KEPT = 1024  # events of a connection not collected are dropped oldest first (their counts stay in ``stats``)
SEEN_REQ_IDS = 16_384  # recent req_ids remembered to discard echoes and loops (Node's ``seen``)
COMPACT_AT = 64 << 10  # a connection's input drops the bytes it consumed once this many accumulate
# Requests (cablestore.peer.requesting)
HASHES_PER_POST_REQUEST = 1024
POST_REQUESTS_IN_FLIGHT = 4  # per connection; more wait in a queue, so none times out unanswered in our buffer
# Bytes of posts a connection's post responses stage before they are stored together (one ingest_many; a turn's
# few responses stay under it, a connection driven by receive_data handles all it was fed at once).  Staged
# posts are stored by the end of the connection's turn: one connection holds some at a time.
STAGED_BYTES = 256 << 10
# How long a hash another request has in flight is waited for before it is asked for here too:
# well within a sync's progress timeout (30 s), and long enough for a post request to be answered.
DEFER_MS = 10_000
# Live pushes (cablestore.peer.live): authors of post/infos and deletes in one commit up to which the live
# state channels they are (ex-)members of are looked up (a point read per channel and author, ~1.5 µs);
# with more, every live state channel is re-read (~35 µs each), as a removal always does.
MEMBER_LOOKUPS = 16
# Hashes a live state request may hold beyond its last answer while stale (commits of its own peer's posts
# mark it stale instead of re-reading the channel's state; see cablestore.peer.live): past it, re-read at once.
STALE_HASHES = 1024
# Dialling the peers a node keeps (cablestore.peer.dialing): the wait before the first retry, doubled
# after each failure up to the cap, reset once a connection stayed up for DIAL_STABLE; and how long a
# TCP connect may take.  A peer that is down costs at most one attempt per wait.
DIAL_BASE = 0.5
DIAL_CAP = 30.0
DIAL_STABLE = 10.0
CONNECT_TIMEOUT = 5.0
# A listener logs a failed handshake at most once per cause and address in this many seconds (it counts them all).
FAILURE_LOG_SECONDS = 60.0
# Sync (cablestore.peer.sync)
MAX_LISTED_CHANNELS = 16 * CHANNELS_PER_RESPONSE  # a sync takes at most this many channels from one peer's list
# Channels a live sync keeps live requests open for (two each): as many as one channel list page, so
# a peer listing 65,536 channels cannot make this peer hold 131,072 requests for it.
MAX_LIVE_CHANNELS = CHANNELS_PER_RESPONSE
DEFAULT_MARGIN = 60 * 60 * 1000  # an hour: posts skewed further back than this are missed by a resync
DEFAULT_PROGRESS_TIMEOUT = 30_000  # the default of ``sync --progress-timeout``
PROBE_WAIT = 1000  # ms a sync waits for the answer to its reconciliation probe (a peer that ignores it answers its channel list first)
RECONCILE_RANGES_PER_CONNECTION = 1 << 18  # reconciliation ranges one connection may have answered (each a few reads; a sketch 1 per 16 items it may read); past it: refused
PARALLEL_CHANNELS = 8  # channels whose history and state are asked for at once
MIN_HISTORY_PAGE = 64  # hashes a page of history asks for at least (a page: the pending-hash bound / 2 / PARALLEL_CHANNELS)
CHANNEL_WAIT = 10_000  # ms a sync waits for another sync of the same channel before fetching it too
# Sockets (cablestore.peer.sockets)
WRITE_CHUNK = 64 << 10  # handed to a socket at once; also its write buffer's high-water mark
PUMP_SECONDS = 0.005  # work between two looks at the sockets
BACKLOG = 512  # connections the kernel queues before they are accepted
# A private connection (cablestore.peer.secure): read no further ahead than the longest handshake message until it is through
HANDSHAKE_READ = 96
# An embedded peer's feeds of new posts (cablestore.peer.postfeed): posts kept for a reader that is behind
FEED_BUFFER = 1000
# The control socket of a served store (cablestore.peer.control)
MAX_REQUEST = 64 << 10  # a command's request (argv and cwd), at most
MAX_LINE = 1 << 20  # a reply line read by the client, at most
CHUNK = 16 << 10  # read from the control socket at once
MAX_RUNNING = 8  # commands run at once
REQUEST_SECONDS = 5.0  # to send a whole request
SEND_SECONDS = 60.0  # to take a reply


@dataclass(frozen=True)
class Limit:
    """One limit: its name, its default, whether an operator sets it (and how), and what it bounds."""

    name: str
    default: object
    settable: str  # how an operator sets it ("" : fixed)
    bounds: str


_CLI = {
    "max_connections": "serve --max-connections",
    "memory_mb": "serve/sync --memory-mb",
    "live_per_peer": "serve --max-live",
    "idle_timeout": "serve --idle-timeout",
    "frame_timeout": "serve --slow-timeout",
    "stall_timeout": "serve --slow-timeout",
    "request_timeout": "serve --request-timeout",
    "handshake_timeout": "serve --handshake-timeout",
    "connections_per_address": "serve --max-per-address",
    "connections_per_user": "serve --max-per-user",
}
_SETTABLE_BOUNDS = {
    "max_connections": "connections at once (accepted beyond it: closed)",
    "memory_mb": "the process's memory budget (MB); the pool is what the base and every connection's share leave",
    "live_per_peer": "live requests of one peer",
    "live_reserved": "live requests a peer may hold whatever the others hold",
    "live_total": "live requests of all peers",
    "forwards_per_peer": "forwarded requests of one peer",
    "forwards_reserved": "forwarded requests a peer may hold whatever the others hold",
    "forwards_total": "forwarded requests of all peers",
    "forward_fanout": "connections one request is forwarded to",
    "active_per_peer": "long answers of one connection in progress at once",
    "slice_units": "units of work in one turn of a connection",
    "idle_timeout": "ms a peer may send nothing with nothing open",
    "frame_timeout": "ms a message begun may go without a byte (and after which it must average MIN_MESSAGE_RATE)",
    "stall_timeout": "ms a peer may read none of its answers",
    "request_timeout": "ms before a finite request (ours, or one forwarded) is given up",
    "handshake_timeout": "ms a Cable Handshake (a private listener or sync) may take; the half-open one holds a connection slot meanwhile",
    "connections_per_address": "accepted connections from one host at once (0: no limit; loopback tests and NAT share hosts)",
    "connections_per_user": "connections of one identified user at once (more are closed after the handshake); their live and forwarded requests count together",
    "input_reserved": "input bytes a connection buffers outside the pool",
    "output_reserved": "output bytes a connection buffers outside the pool",
    "output_high": "output bytes past which a connection is not worked for",
    "output_max": "unread output bytes past which a live push closes the connection",
    "read_chunk": "bytes read from a socket at once",
    "hashes_per_page": "hashes of a time range answered in one unit of work",
    "posts_per_page": "posts of a post request answered in one unit of work",
    "pending_hashes": "hashes waited on at once (0: half the pool at 512 bytes each)",
    "reconcile": "1: settle channels by set reconciliation with peers that speak it (docs/reconcile.md); 0: native requests only, the extension ignored",
}
# Module constants an operator sets anyway, as the default of an argument.
_SET_OTHERWISE = {
    "DEFAULT_PROGRESS_TIMEOUT": "sync --progress-timeout (s), Sync(progress_timeout=)",
    "DEFAULT_MARGIN": "Sync(margin=)",
    "PARALLEL_CHANNELS": "Sync(parallel=)",
    "SEEN_REQ_IDS": "Node(seen=)",
    "FEED_BUFFER": "Peer.posts(buffer=)",
}
_FIXED = (
    ("BASE_BYTES", "bytes of the memory budget kept for the interpreter and the store"),
    ("MIN_MESSAGE_RATE", "bytes a second a message must average once it has taken frame_timeout ms"),
    ("CONNECTION_BYTES", "bytes of the memory budget each allowed connection holds outside the pool"),
    ("STORE_CACHE_MB", "MB of LevelDB block cache a peer process (serve, sync) opens its store with"),
    ("VERIFY_WORKERS", "threads verifying the signatures a peer process (serve, sync) ingests, beside its event loop"),
    ("HASHES_PER_RESPONSE", "hashes in one hash response"),
    ("CHANNELS_PER_RESPONSE", "channels in one channel list response (a decoder's limit)"),
    ("SPELLINGS_PER_TURN", "channels of a channel list answer spelled in one turn"),
    ("POST_RESPONSE_BYTES", "bytes of posts in one post response"),
    ("POST_PAGE_BYTES", "bytes of posts read in one unit of work"),
    ("RELAYED_HASHES", "distinct hashes relayed for one forwarded request"),
    ("EVENTS_KEPT", "events a connection keeps uncollected"),
    ("SEEN_REQ_IDS", "recent req_ids remembered to drop echoes and loops"),
    ("COMPACT_AT", "consumed input bytes a connection keeps before dropping them"),
    ("HASHES_PER_POST_REQUEST", "hashes in one post request of ours"),
    ("POST_REQUESTS_IN_FLIGHT", "post requests of ours unanswered on one connection"),
    ("STAGED_BYTES", "bytes of posts received that one connection stages before storing them together"),
    ("DEFER_MS", "ms a hash in flight elsewhere is waited for before it is asked for again"),
    ("MEMBER_LOOKUPS", "authors in one commit whose channels a live push looks up (more: every live state channel is re-read)"),
    ("STALE_HASHES", "hashes a live state request left stale by its own peer's posts holds beyond its last answer (more: re-read at once)"),
    ("DIAL_BASE", "s before a node dials a peer it keeps again, after the first failure or drop (doubled after each)"),
    ("DIAL_CAP", "s: the longest wait between two attempts to reach a peer"),
    ("DIAL_STABLE", "s a connection must stay up for the next drop to be retried after DIAL_BASE again"),
    ("CONNECT_TIMEOUT", "s a TCP connect to a peer may take before the attempt counts as failed"),
    ("FAILURE_LOG_SECONDS", "s between two log lines of failed handshakes of one cause from one address (all are counted)"),
    ("MAX_LISTED_CHANNELS", "channels a sync takes from one peer's list"),
    ("MAX_LIVE_CHANNELS", "channels a live sync keeps live requests open for"),
    ("DEFAULT_MARGIN", "ms the sync cursor is set back from the newest synced post"),
    ("DEFAULT_PROGRESS_TIMEOUT", "ms a sync waits for an answer or a post"),
    ("PARALLEL_CHANNELS", "channels a sync asks for at once"),
    ("MIN_HISTORY_PAGE", "hashes a page of history asks for at least (a page: the pending-hash bound / 2 / PARALLEL_CHANNELS)"),
    ("CHANNEL_WAIT", "ms a sync waits for another sync of the same channel"),
    ("PROBE_WAIT", "ms a sync waits for the answer to its set reconciliation probe (at most; a peer that ignores it answers its channel list first)"),
    ("RECONCILE_RANGES_PER_CONNECTION", "set reconciliation ranges answered for one connection (a few reads each; a sketch 1 per 16 items it may read); then refused"),
    ("WRITE_CHUNK", "bytes handed to a socket at once"),
    ("PUMP_SECONDS", "seconds of work between two looks at the sockets"),
    ("BACKLOG", "connections the kernel queues before they are accepted"),
    ("HANDSHAKE_READ", "bytes read from a private connection at once until its handshake is through"),
    ("FEED_BUFFER", "posts a feed of new posts keeps for a reader that is behind (past it: FellBehindError)"),
    ("MAX_REQUEST", "bytes of one control-socket request"),
    ("MAX_LINE", "bytes of one control-socket reply line"),
    ("CHUNK", "bytes read from the control socket at once"),
    ("MAX_RUNNING", "control-socket commands run at once"),
    ("REQUEST_SECONDS", "seconds to send a whole control-socket request"),
    ("SEND_SECONDS", "seconds to take a control-socket reply"),
)


def _catalog() -> tuple[Limit, ...]:
    settable = tuple(
        Limit(f.name, getattr(DEFAULT_POLICY, f.name), f"PeerLimits.{f.name}" + (f", {_CLI[f.name]}" if f.name in _CLI else ""), _SETTABLE_BOUNDS[f.name])
        for f in fields(PeerLimits)
    )
    return settable + tuple(Limit(name, globals()[name], _SET_OTHERWISE.get(name, ""), bounds) for name, bounds in _FIXED)


#: Every limit of a peer: the settable ones (:class:`PeerLimits`) first, then the fixed ones.
LIMITS = _catalog()


def limits_table() -> str:
    """The limits as the Markdown table in docs/operations.md (a test checks the doc shows exactly this)."""
    rows = ["| limit | default | set by | bounds |", "|---|---|---|---|"]
    for limit in LIMITS:
        rows.append(f"| `{limit.name}` | {limit.default:_} | {limit.settable or 'fixed'} | {limit.bounds} |")
    return "\n".join(rows) + "\n"
