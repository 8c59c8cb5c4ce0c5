"""The Cable Handshake (handshake.md 1.0-draft8), sans-I/O: bytes in, bytes and events out, time passed in.

One :class:`CableHandshake` is one connection's side, in both of the
spec's phases:

1. The Noise handshake, ``Noise_XXpsk0_25519_ChaChaPoly_BLAKE2b``
   (:mod:`cablestore.wire.noise`) with the cabal key as psk0.  The
   initiator (the TCP client) writes 48 bytes, the responder 96, the
   initiator 64: the spec ferries Noise's messages with no length prefix
   and empty payloads, so these sizes are fixed.  The prologue is
   ``CABLE/1.0`` (§3.2); cable-handshake.ts 1.0.0 and cable.rs use
   ``CABLE1.0``.  An initiator uses the one it is given; a responder tries
   each it accepts on message 1, whose MAC covers the handshake hash and so
   the prologue, and keeps the one that authenticates.
2. Post-handshake operation (§4): every message goes as ``EncryptWithAd``
   of its 4-byte little-endian ``totalLen``, then its segments of at most
   65,519 bytes, each with its 16-byte MAC; ``totalLen = (n - 1) * 65535 +
   (last + 16)``.  A zero-length message is the end-of-stream marker
   (§4.4), answered with our own.

Feed it what the socket gives (``receive_data``, with ``b""`` for the
socket's end, as h11 does) and the time in milliseconds; send what
``data_to_send`` returns; act on the events: :class:`HandshakeComplete`,
:class:`MessageReceived`, :class:`EndOfStream` (write what is pending,
then close) and :class:`Failed` (close at once; nothing more is sent).
Nothing is buffered beyond one handshake message, one 20-byte length,
one segment and a message within ``max_message``.  What a message holds
(draft8's wire messages, with their ``msg_len``) is the caller's business.
"""

from __future__ import annotations

import dataclasses
import struct

from cablestore.errors import ArgumentError, HandshakeError, NotHandshakeError, WrongCabalKeyError
from cablestore.wire.crypto import Keypair
from cablestore.wire.messages import Limits
from cablestore.wire.noise import MAX_NOISE_MESSAGE, PSKLEN, TAGLEN, CipherState, HandshakeState
from cablestore.wire.responder import (  # noqa: F401  (CABLE_PROLOGUE, LEGACY_PROLOGUE, PROLOGUES: named here too)
    CABLE_PROLOGUE,
    LEGACY_PROLOGUE,
    NOT_HANDSHAKE,
    PROLOGUES,
    WRONG_KEY,
    ResponderKeys,
    plain_cable_start,
    whole_plain_messages,
)
from cablestore.wire.static_keys import x25519_private_of

HANDSHAKE_MESSAGE_SIZES = (48, 96, 64)  # -> psk, e | <- e, ee, s, es | -> s, se; empty payloads
HANDSHAKE_TIMEOUT_MS = 10_000
END_TIMEOUT_MS = 5_000  # how long to wait for the answer to our end-of-stream marker
MAX_SEGMENT = MAX_NOISE_MESSAGE  # 65,535 bytes of ciphertext
MAX_SEGMENT_PLAINTEXT = MAX_NOISE_MESSAGE - TAGLEN  # 65,519
LENGTH_FRAME = 4 + TAGLEN  # the encrypted totalLen
DEFAULT_MAX_MESSAGE = Limits().max_message + 10  # a wire message with its msg_len varint
_MAX_TOTAL_LEN = 2**32 - 1

_HANDSHAKE, _OPEN, _DONE, _FAILED = "handshake", "open", "done", "failed"


@dataclasses.dataclass(frozen=True)
class HandshakeComplete:
    """The Noise handshake is through: the remote knows the cabal key and holds the secret of ``remote_static`` (X25519)."""

    remote_static: bytes
    prologue: bytes
    handshake_hash: bytes


@dataclasses.dataclass(frozen=True)
class MessageReceived:
    """One whole message from the remote (at least one byte)."""

    data: bytes


@dataclasses.dataclass(frozen=True)
class EndOfStream:
    """The remote's end-of-stream marker: both markers are exchanged (ours is in ``data_to_send`` if it was not sent yet); close after writing."""


@dataclasses.dataclass(frozen=True)
class Failed:
    """The connection must be closed now: the handshake failed or timed out, or the channel broke."""

    error: HandshakeError


Event = HandshakeComplete | MessageReceived | EndOfStream | Failed


def total_len(message_len: int) -> int:
    """§4.2.3: the ``totalLen`` of a message of ``message_len`` bytes (no fragmentation up to 65,519 bytes)."""
    n = max(1, -(-message_len // MAX_SEGMENT_PLAINTEXT))
    return (n - 1) * MAX_SEGMENT + (message_len - (n - 1) * MAX_SEGMENT_PLAINTEXT) + TAGLEN


def _plaintext_len(total: int) -> int | None:
    """The message length a ``totalLen`` announces (§4.3's reading), or None when its last segment is shorter than a MAC."""
    n = max(1, -(-total // MAX_SEGMENT))
    last = total - (n - 1) * MAX_SEGMENT
    return None if last < TAGLEN else total - n * TAGLEN


class CableHandshake:
    """One side of one connection speaking the Cable Handshake; see the module's doc for the flow.

    ``initiator``: True for the TCP client.  ``cabal_key``: the 32-byte psk.
    ``keypair``: the user's Ed25519 keypair, used in its X25519 form (a
    fresh one when left out: the remote then sees an unknown user).
    ``now``: milliseconds, the start of the ``timeout_ms`` the handshake has.
    ``prologue``: what an initiator uses; ``accept_prologues``: what a
    responder accepts.  ``max_message``: the longest message accepted; a
    ``totalLen`` announcing more ends the connection before anything of it
    is buffered.  ``responder_keys``: a responder's precomputed keys
    (:class:`ResponderKeys`, several cabals on one listener; ``cabal_key``
    is then None): :attr:`cabal` says which one authenticated message 1.

    Failures say what happened (:attr:`error`): the other side speaking plain
    Cable is :class:`cablestore.errors.NotHandshakeError`, a message 1 that
    authenticates under no key here (or, to an initiator, a close right
    after its message 1) :class:`cablestore.errors.WrongCabalKeyError`.
    """

    def __init__(self, *, initiator: bool, cabal_key: bytes | None, now: int, keypair: Keypair | None = None,
                 prologue: bytes = CABLE_PROLOGUE, accept_prologues: tuple[bytes, ...] = PROLOGUES,
                 timeout_ms: int = HANDSHAKE_TIMEOUT_MS, end_timeout_ms: int = END_TIMEOUT_MS,
                 max_message: int = DEFAULT_MAX_MESSAGE, responder_keys: ResponderKeys | None = None) -> None:
        if responder_keys is not None and (initiator or cabal_key is not None):
            raise ArgumentError("responder_keys are a responder's, instead of cabal_key")
        if responder_keys is None and (not isinstance(cabal_key, (bytes, bytearray)) or len(cabal_key) != PSKLEN):
            raise ArgumentError(f"a cabal key is {PSKLEN} bytes")
        if not isinstance(prologue, (bytes, bytearray)) or not accept_prologues \
                or not all(isinstance(p, (bytes, bytearray)) for p in accept_prologues):
            raise ArgumentError("prologues are bytes, and a responder accepts at least one")
        if timeout_ms <= 0 or end_timeout_ms <= 0 or max_message < 1:
            raise ArgumentError("timeouts and max_message are positive")
        self.initiator = bool(initiator)
        self._static = x25519_private_of(keypair if keypair is not None else Keypair())
        self._keys = responder_keys
        if self._keys is None and not initiator:
            self._keys = ResponderKeys([cabal_key], tuple(bytes(p) for p in accept_prologues))
        self._psk = None if cabal_key is None else bytes(cabal_key)
        self.cabal: int | None = None  # a responder: the index of the key message 1 authenticated under
        self._end_timeout = end_timeout_ms
        self._max_message = max_message
        self._deadline: int | None = now + timeout_ms
        self._state = _HANDSHAKE
        self._in = bytearray()
        self._out = bytearray()
        self._hs: HandshakeState | None = None
        self._tx: CipherState | None = None
        self._rx: CipherState | None = None
        self._remaining: int | None = None  # ciphertext bytes of the message being read; None: a length comes next
        self._message = bytearray()
        self._sent_end = False
        self.prologue: bytes | None = None
        self.remote_static: bytes | None = None
        self.handshake_hash: bytes | None = None
        self.error: HandshakeError | None = None
        if self.initiator:
            self.prologue = bytes(prologue)
            self._hs = HandshakeState(initiator=True, prologue=self.prologue, static_private=self._static, psk=self._psk)
            self._out += self._hs.write_message()
        self._sent_message1 = self.initiator

    # --- what the caller asks -------------------------------------------------

    @property
    def handshake_complete(self) -> bool:
        """Whether the Noise handshake is through (messages may flow)."""
        return self.remote_static is not None

    @property
    def finished(self) -> bool:
        """Whether the connection is over: both end-of-stream markers exchanged, or failed."""
        return self._state in (_DONE, _FAILED)

    @property
    def buffered(self) -> int:
        """Bytes held here: the part of a frame read so far and the segments of a message being read (at most ``max_message`` + 65,535)."""
        return len(self._in) + len(self._message)

    @property
    def deadline(self) -> int | None:
        """When (ms) :meth:`check_time` must next be called: the end of the handshake's time, or of the wait for the remote's marker."""
        return self._deadline

    def data_to_send(self) -> bytes:
        """The bytes to write to the socket now (and forget here)."""
        out = bytes(self._out)
        self._out.clear()
        return out

    def check_time(self, now: int) -> list[Event]:
        """[Failed] once the handshake's time, or the wait for the remote's end-of-stream marker, is over; else []."""
        if self._deadline is None or now < self._deadline or self.finished:
            return []
        if self._state != _HANDSHAKE:
            return [self._fail("no end-of-stream marker came back in time")]
        if self._in:
            return [self._fail(NotHandshakeError(f"{NOT_HANDSHAKE}: {len(self._in)} bytes came, not a whole handshake message"))]
        return [self._fail("the handshake did not finish in time" + (": the peer sent nothing back (no cabal key there?)" if self.initiator else ""))]

    def send_message(self, message: bytes) -> None:
        """Queue one message (at least one byte; the empty message is :meth:`end`'s) in ``data_to_send``."""
        if self._state != _OPEN or self._sent_end:
            raise HandshakeError("no message can be sent: " + ("the stream is ended" if self._sent_end or self.finished else "the handshake is not complete"))
        if not isinstance(message, (bytes, bytearray, memoryview)) or len(message) == 0:
            raise ArgumentError("a message is non-empty bytes (the empty message is the end-of-stream marker: end())")
        if total_len(len(message)) > _MAX_TOTAL_LEN:
            raise ArgumentError(f"a message of {len(message)} bytes does not fit in a 4-byte totalLen")
        self._write(memoryview(bytes(message)))

    def end(self, now: int) -> None:
        """Queue our end-of-stream marker; the remote's must come back within ``end_timeout_ms`` (else :meth:`check_time` fails)."""
        if self._state != _OPEN or self._sent_end:
            return
        self._write(memoryview(b""))
        self._sent_end = True
        self._deadline = now + self._end_timeout

    def receive_data(self, data: bytes, now: int) -> list[Event]:
        """Take bytes from the socket (``b""``: the socket ended) and return what happened, in order."""
        if self.finished:
            return []
        late = self.check_time(now)
        if late:
            return late
        if not data:
            if self._state == _HANDSHAKE:
                return [self._fail(self._closed_in_handshake())]
            return [self._fail("the connection closed without an end-of-stream marker")]
        view, at = memoryview(data), 0
        events: list[Event] = []
        try:
            while not self.finished:  # one frame at a time: nothing is held beyond the frame being read
                need = self._need()
                take = min(need - len(self._in), len(view) - at)
                if len(self._in) + take < need:
                    self._in += view[at:]
                    if self._state == _HANDSHAKE and whole_plain_messages(self._in):
                        raise NotHandshakeError(NOT_HANDSHAKE if self.initiator else f"{NOT_HANDSHAKE}: a plain Cable client")
                    break
                if self._in:
                    self._in += view[at:at + take]
                    chunk = bytes(self._in)
                    self._in.clear()
                else:
                    chunk = bytes(view[at:at + take])
                at += take
                event = self._step(chunk)
                if event is not None:
                    events.append(event)
        except HandshakeError as e:
            events.append(self._fail(e))
        return events

    # --- inside -------------------------------------------------------------

    def _closed_in_handshake(self) -> HandshakeError:
        if self._in:
            return NotHandshakeError(f"{NOT_HANDSHAKE}: it sent {len(self._in)} bytes that are no handshake message, and closed")
        if self.initiator and self._hs is not None and self._sent_message1:
            return WrongCabalKeyError(f"{WRONG_KEY} (it closed the connection on message 1)")
        return HandshakeError("the connection closed during the handshake")

    def _fail(self, reason: str | HandshakeError) -> Failed:
        self.error = reason if isinstance(reason, HandshakeError) else HandshakeError(reason)
        self._state = _FAILED
        self._deadline = None
        self._in.clear()
        self._out.clear()
        self._message.clear()
        self._hs = self._tx = self._rx = None
        return Failed(self.error)

    def _need(self) -> int:
        if self._state == _HANDSHAKE:
            index = 0 if self._hs is None else (1 if self.initiator else 2)
            return HANDSHAKE_MESSAGE_SIZES[index]
        if self._remaining is None:
            return LENGTH_FRAME
        return min(self._remaining, MAX_SEGMENT)

    def _step(self, chunk: bytes) -> Event | None:
        if self._state == _HANDSHAKE:
            return self._handshake_step(chunk)
        if self._remaining is None:
            (total,) = struct.unpack("<I", self._rx.decrypt_with_ad(b"", chunk))
            if total == 0:  # cable-handshake.ts's marker: a bare zero length
                return self._remote_ended()
            size = _plaintext_len(total)
            if size is None:
                raise HandshakeError(f"totalLen {total} leaves a last segment shorter than its MAC")
            if size > self._max_message:
                raise HandshakeError(f"a message of {size} bytes, limit {self._max_message}")
            self._remaining = total
            return None
        self._message += self._rx.decrypt_with_ad(b"", chunk)
        self._remaining -= len(chunk)
        if self._remaining:
            return None
        self._remaining = None
        message = bytes(self._message)
        self._message.clear()
        return MessageReceived(message) if message else self._remote_ended()

    def _handshake_step(self, chunk: bytes) -> Event | None:
        if self._hs is None:  # the responder, message 1: which cabal key and prologue authenticate it
            found = self._keys.find(chunk)
            if found is None:
                if plain_cable_start(chunk):
                    raise NotHandshakeError(f"{NOT_HANDSHAKE}: a plain Cable client")
                raise WrongCabalKeyError("message 1 does not authenticate: another cabal key, or a prologue not accepted")
            self.cabal, key, read = found
            self._hs = HandshakeState.after_message1(key.prologue, key.psk, read, self._static)
            self.prologue = key.prologue
            self._out += self._hs.write_message()
            return None
        try:
            self._hs.read_message(chunk)
        except HandshakeError as exc:
            if self.initiator:  # a responder that holds our key never sends a message 2 that fails: this one is no handshake
                raise NotHandshakeError(f"{NOT_HANDSHAKE}: its answer is not a handshake message 2") from exc
            raise
        if self.initiator:
            self._out += self._hs.write_message()
        c1, c2 = self._hs.split()
        self._tx, self._rx = (c1, c2) if self.initiator else (c2, c1)
        self.remote_static = self._hs.remote_static
        self.handshake_hash = self._hs.handshake_hash()
        self._hs = None
        self._state = _OPEN
        self._deadline = None
        return HandshakeComplete(self.remote_static, self.prologue, self.handshake_hash)

    def _remote_ended(self) -> EndOfStream:
        self._in.clear()  # the remote MUST NOT send anything after its marker; what it did is dropped
        if not self._sent_end:
            self._write(memoryview(b""))
            self._sent_end = True
        self._state = _DONE
        self._deadline = None
        return EndOfStream()

    def _write(self, message: memoryview) -> None:
        tx = self._tx
        self._out += tx.encrypt_with_ad(b"", struct.pack("<I", total_len(len(message))))
        at = 0
        while True:  # at least one segment: the empty message (the marker) is one empty segment and its MAC
            self._out += tx.encrypt_with_ad(b"", message[at:at + MAX_SEGMENT_PLAINTEXT])
            at += MAX_SEGMENT_PLAINTEXT
            if at >= len(message):
                break
