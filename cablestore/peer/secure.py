"""A private connection: the Cable Handshake (:mod:`cablestore.wire.handshake`) around a
:class:`cablestore.peer.protocol.Connection`, sans-I/O, with the Connection's own bytes-in/bytes-out surface.

:class:`SecureChannel` takes the socket's bytes (:meth:`SecureChannel.feed`)
and gives the socket's bytes (:meth:`SecureChannel.data_to_send`); the
transport (:mod:`cablestore.peer.sockets`) drives it exactly as it drives a
plain Connection.  Inside:

* until the Noise handshake is through, only its three messages pass; the
  Connection is neither fed nor read, so a plain client, a wrong key or
  garbage gets nothing and is closed (nothing of it is read as a wire
  message), and the socket is read a handshake message's size at a time;
* the handshake must finish within ``policy.handshake_timeout`` ms
  (:meth:`check_time`, called on the transport's tick); meanwhile the
  Connection exists, so a half-open handshake holds a connection slot
  (``policy.max_connections``) like any other connection;
* then every wire message the Connection writes (``msg_len`` varint and
  body: draft8's framing, 8-byte ``req_id``, no ``circuit_id``, no
  ``ttl``) goes as one handshake message, split off the Connection's byte
  stream by its ``msg_len``; every handshake message received must be
  exactly one wire message (its ``msg_len`` included, as wire.md defines the
  header), else the connection closes (``framing``);
* a ``totalLen`` over the message bound (``limits.max_message`` and its
  varint), a segment that fails to decrypt, or a message that takes over
  ``policy.frame_timeout`` ms to arrive close the connection;
* the bytes held here (a partial message, encrypted output) count in the
  node's buffer pool;
* the end-of-stream marker: :meth:`end` sends ours; the remote's is answered
  and the connection then closes (``ended``).

``on_open(channel, now)`` is called once the handshake is through (the
transport identifies the remote user there and may close the connection).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cablestore.errors import (
    ArgumentError,
    BlockedError,
    CabalKeyRequiredError,
    CableError,
    FramingError,
    HandshakeError,
    NotHandshakeError,
    SlowPeerError,
    TooManyConnectionsError,
    WrongCabalKeyError,
)
from cablestore.peer import limits
from cablestore.peer.inbox import trickle
from cablestore.peer.limits import FAILURE_LOG_SECONDS, HANDSHAKE_READ
from cablestore.wire.crypto import Keypair
from cablestore.wire.fields import read_varint
from cablestore.wire.handshake import CABLE_PROLOGUE, PROLOGUES, CableHandshake, EndOfStream, Failed, HandshakeComplete, MessageReceived
from cablestore.wire.messages import DRAFT8
from cablestore.wire.noise import PSKLEN
from cablestore.wire.static_keys import identify as identify_static

if TYPE_CHECKING:
    from cablestore.store.store import Store


@dataclasses.dataclass(frozen=True)
class PrivateCabal:
    """What a private listener or sync needs: the cabal key (32 bytes, the psk), the local keypair, the prologue.

    ``keypair``: the user's Ed25519 keypair (its X25519 form is the static
    key; the same keypair signs posts).  None: one fresh keypair for the
    run, so remotes see an unknown user.  ``prologue``: what an initiator
    uses (``CABLE/1.0``, the spec's; ``CABLE1.0`` for cable-handshake.ts
    1.0.0 and cable.rs); a responder accepts ``accept``, both by default.
    """

    cabal_key: bytes
    keypair: Keypair | None = None
    prologue: bytes = CABLE_PROLOGUE
    accept: tuple[bytes, ...] = PROLOGUES

    def __post_init__(self) -> None:
        if not isinstance(self.cabal_key, (bytes, bytearray)) or len(self.cabal_key) != PSKLEN:
            raise ArgumentError(f"a cabal key is {PSKLEN} bytes")
        if self.keypair is None:
            object.__setattr__(self, "keypair", Keypair())
        if self.prologue not in PROLOGUES:
            raise ArgumentError(f"prologue must be one of {', '.join(p.decode() for p in PROLOGUES)}")


log = logging.getLogger("cablestore.peer.transport")


def failure_cause(error: HandshakeError) -> str:
    """What a failed handshake was, in one word: ``plain`` (the remote speaks plain Cable), ``key`` (another cabal key), ``timeout`` or ``closed``."""
    if isinstance(error, NotHandshakeError):
        return "plain"
    if isinstance(error, WrongCabalKeyError):
        return "key"
    return "timeout" if "in time" in str(error) else "closed"


class HandshakeFailures:
    """Failed handshakes of a listener, counted per cause and address, logged at most once a minute per (cause, address)."""

    def __init__(self, stats: Counter | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.stats = stats if stats is not None else Counter()
        self.by_address: Counter = Counter()
        self._logged: dict[tuple[str, str], tuple[float, int]] = {}  # (cause, address) -> (when logged, count then)
        self._clock = clock

    def record(self, cause: str, address: str | None, error: CableError | None = None) -> None:
        """Count one failure; log it unless this cause and address were logged within the last minute."""
        address = address or "?"
        self.stats[f"handshakes_failed_{cause}"] += 1
        self.by_address[(cause, address)] += 1
        key, now, count = (cause, address), self._clock(), self.by_address[(cause, address)]
        last = self._logged.get(key)
        if last is not None and now - last[0] < FAILURE_LOG_SECONDS:
            return
        if len(self._logged) > 10_000:  # addresses come and go: forget the oldest half
            for old in list(self._logged)[:5_000]:
                del self._logged[old]
        since = count - (last[1] if last else 0)
        log.warning("failed handshake (%s) from %s%s: %s", cause, address, f", {since} since the last line" if last else "", error)
        self._logged[key] = (now, count)


def one_wire_message(data: bytes) -> bool:
    """True if ``data`` is exactly one wire message: a ``msg_len`` varint and that many bytes."""
    try:
        size, pos = read_varint(data, 0)
    except CableError:
        return False
    return size > 0 and pos + size == len(data)


class SecureChannel:
    """The Cable Handshake around one Connection (see the module)."""

    framing = DRAFT8

    def __init__(self, conn: Any, private: PrivateCabal, *, initiator: bool, now: int,
                 on_open: Callable[[SecureChannel, int], None] | None = None, hs: CableHandshake | None = None,
                 failures: HandshakeFailures | None = None) -> None:
        self.conn = conn
        state = conn.state
        self.policy = state.policy
        self.hs = hs if hs is not None else CableHandshake(
            initiator=initiator, cabal_key=private.cabal_key, now=now, keypair=private.keypair, prologue=private.prologue,
            accept_prologues=private.accept, timeout_ms=self.policy.handshake_timeout, max_message=state.limits.max_message + 10,
        )
        self.on_open = on_open
        self.failures = failures  # a listener's: each failed handshake is counted and logged there
        self._plain = bytearray()  # the Connection's output not yet a whole wire message
        self._cipher = bytearray()  # bytes for the socket
        self._held = 0  # what is counted in the pool for this
        self.partial_since: int | None = None
        self.progress_at: int | None = None  # when the last byte of the message still arriving came
        self.ended = False  # both end-of-stream markers exchanged: close once the output is out
        self._take_handshake_output()

    # --- the surface the transport drives -------------------------------------
    @property
    def open(self) -> bool:
        """Whether the handshake is through."""
        return self.hs.handshake_complete

    @property
    def closed(self) -> bool:
        """Whether the Connection is closed."""
        return self.conn.closed

    @property
    def writable(self) -> bool:
        """Whether the socket takes more (the Connection's flag)."""
        return self.conn.writable

    def set_writable(self, writable: bool) -> None:
        """The transport says whether the socket takes more."""
        self.conn.set_writable(writable)

    def read_allowance(self) -> int:
        """Bytes the socket may be read for now: a handshake message's worth, then the Connection's allowance."""
        if self.conn.closed or self.hs.finished or self.ended:
            return 0
        if not self.open:
            return HANDSHAKE_READ
        return self.conn.read_allowance()

    @property
    def output_buffered(self) -> int:
        """Bytes for the socket, here or (once open) still in the Connection."""
        return len(self._cipher) + len(self._plain) + (self.conn.output_buffered if self.open and not self.ended else 0)

    def feed(self, data: bytes, now: int) -> None:
        """Bytes read from the socket (``b""``: it ended)."""
        if self.conn.closed:
            return
        events = self.hs.receive_data(data, now)
        self._events(events, now)
        self._take_handshake_output()
        if self.hs.buffered:
            if self.partial_since is None or any(isinstance(e, MessageReceived) for e in events):
                self.partial_since = now  # the message now partial began arriving in this read
            self.progress_at = now
        else:
            self.partial_since = self.progress_at = None
        self._account()

    def data_to_send(self, max_bytes: int | None = None) -> bytes:
        """Bytes for the socket (at most ``max_bytes``): the handshake's, then the Connection's wire messages, encrypted."""
        if self.conn.closed and not self._cipher:
            return b""
        want = (1 << 62) if max_bytes is None else max_bytes
        if self.open and not self.ended and not self.hs.finished:
            while len(self._cipher) < want and self.conn.output_buffered:
                chunk = self.conn.data_to_send(want - len(self._cipher))
                if not chunk:
                    break
                self._plain += chunk
                self._seal()
        self._take_handshake_output()
        out = bytes(self._cipher[:want])
        del self._cipher[:want]
        self._account()
        return out

    def check_time(self, now: int) -> None:
        """The handshake's deadline, the wait for the remote's marker, a message that takes too long (the transport's tick)."""
        if self.conn.closed:
            return
        self._events(self.hs.check_time(now), now)
        waiting = self.conn.inbox.ready_bytes >= self.policy.input_reserved  # reading paused for our backlog: not the remote's slowness
        slow = None if waiting else trickle(now, self.partial_since, self.progress_at, self.hs.buffered, self.policy.frame_timeout, limits.MIN_MESSAGE_RATE)
        if not self.conn.closed and slow is not None:
            self.conn.close_detail = f"this side closed it: the peer was slow: {slow}"
            self._close(SlowPeerError(f"slow: {slow}"), "slow")

    def end(self, now: int) -> None:
        """Send our end-of-stream marker (what the Connection wrote before goes first)."""
        if self.open and not self.hs.finished:
            self.data_to_send()  # the Connection's pending messages, sealed ahead of the marker
            self.hs.end(now)
            self._take_handshake_output()

    # --- inside ---------------------------------------------------------------
    def _seal(self) -> None:
        plain = self._plain
        while plain:
            try:
                size, pos = read_varint(plain, 0)
            except CableError:
                return  # the varint is not whole yet
            if pos + size > len(plain):
                return
            self.hs.send_message(bytes(plain[: pos + size]))
            del plain[: pos + size]
            self._cipher += self.hs.data_to_send()

    def _take_handshake_output(self) -> None:
        self._cipher += self.hs.data_to_send()

    def _account(self) -> None:
        held = len(self._plain) + len(self._cipher) + self.hs.buffered
        if held != self._held:
            self.conn.state.account(held - self._held)
            self._held = held

    def _events(self, events: list, now: int) -> None:
        conn = self.conn
        for event in events:
            if conn.closed:
                return
            if isinstance(event, MessageReceived):
                if not one_wire_message(event.data):
                    self._close(FramingError("a handshake message that is not exactly one wire message (msg_len and body)"), "framing")
                    return
                conn.feed(event.data, now)
            elif isinstance(event, HandshakeComplete):
                conn.authenticated = True
                self.conn.state.stats["handshakes"] += 1
                if self.on_open is not None:
                    self.on_open(self, now)
                if conn.closed:
                    return
                conn.state.mark_dirty(conn)  # what it queued meanwhile can go now
            elif isinstance(event, EndOfStream):
                self.ended = True
                self._take_handshake_output()
            elif isinstance(event, Failed):
                self.conn.state.stats["handshakes_failed" if not self.open else "channel_failed"] += 1
                if not self.open and self.failures is not None:
                    self.failures.record(failure_cause(event.error), self.conn.address, event.error)
                self._close(event.error, "handshake")
                return

    def _close(self, error: CableError, reason: str) -> None:
        conn = self.conn
        self._cipher.clear()
        self._plain.clear()
        self._account()
        conn._refuse(error)
        conn.error = error
        conn.close(reason)

    def release(self) -> None:
        """The connection is gone: what is held here leaves the pool."""
        self._plain.clear()
        self._cipher.clear()
        held, self._held = self._held, 0
        if held:
            self.conn.state.account(-held)


def identify(channel: SecureChannel, now: int) -> None:
    """Once the handshake is through: which user the remote is, and close it if the local user blocks them.

    The remote's static key names a user when it is the X25519 form of the
    Ed25519 key of a user the store knows (:meth:`cablestore.Store.known_user`:
    an author of a stored post, or a user a block names); else the remote is
    authenticated as an unknown user (``conn.user`` stays None).  A user the
    local user blocks (``Store.blocks()``, applied moderation included) is
    closed at once (``blocked``), before any wire message is read.  For an
    identified user, ``conn.shunned`` (:meth:`cablestore.Store.shunned`):
    the authors their post requests are not answered with.
    """
    conn = channel.conn
    store = conn.state.store
    remote = channel.hs.remote_static
    user = identify_static(remote, store.known_user) if remote is not None else None
    if user is None:
        return
    if user in store.blocks():
        channel._close(BlockedError(f"{user.hex()[:16]}... is blocked by the local user"), "blocked")
        return
    state, per = conn.state, conn.state.policy.connections_per_user
    if per and state.by_user[user] >= per:
        state.stats["connections_refused"] += 1
        channel._close(TooManyConnectionsError(f"{state.by_user[user]} connections open for user {user.hex()[:16]}..., limit {per}"), "per-user")
        return
    conn.user = user  # set once it is counted: the counts drop as it closes
    state.by_user[user] += 1
    conn.shunned = store.shunned(user)


def require_cabal_key(store: Store, what: str) -> None:
    """Refuse to serve a store bound to a private cabal without its key (a plain listener or sync would hand out its posts)."""
    if store.cabal_digest() is not None:
        raise CabalKeyRequiredError(
            f"this store belongs to a private cabal: {what} it with its cabal key (cabal_key=); nothing was served"
        )
