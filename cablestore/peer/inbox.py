"""The input of one connection: bytes read but not handled yet, split into
whole messages lazily, one at a time, as the connection's turn comes.

Unlike :class:`cablestore.wire.decoding.Decoder` (which decodes everything it
is fed at once) an :class:`Inbox` only finds where each message ends when
bytes arrive, so it knows at once how many whole messages wait
(:attr:`Inbox.ready`), whether an incomplete one is pending and since when
(:attr:`Inbox.partial_since`, for the slow-peer timeout), and a ``msg_len``
that is malformed or above the cap breaks the stream before anything of it
is buffered.  Each message is decoded only when it is taken
(:meth:`Inbox.take`); a body that does not decode is returned as its error,
with the ``req_id`` it named when that much could be read, so a response to
one of our requests that is malformed fails that request at once.
"""

from __future__ import annotations

from cablestore.errors import CableError, DecodeError, FramingError
from cablestore.peer.limits import COMPACT_AT
from cablestore.wire.codec import read_varint
from cablestore.wire.decoding import decode_payload, frame_header
from cablestore.wire.messages import CIRCUIT_SIZE, AnyMessage, Framing, Limits


class BadMessage:
    """A message whose body did not decode: its ``error``, type and ``req_id`` (None when unreadable)."""

    __slots__ = ("error", "msg_type", "req_id")

    def __init__(self, error: CableError, msg_type: int | None, req_id: bytes | None) -> None:
        self.error, self.msg_type, self.req_id = error, msg_type, req_id


class Inbox:
    """Buffered input of one connection (see the module docstring)."""

    def __init__(self, framing: Framing, limits: Limits) -> None:
        self.framing = framing
        self.limits = limits
        self._buf = bytearray()
        self._pos = 0  # start of the first message not taken
        self._scan = 0  # start of the first message not known to be whole
        self._ends: list[int] = []  # ends of whole messages not taken (a queue, read from _head)
        self._head = 0
        self.partial_since: int | None = None
        self.progress_at: int | None = None  # when the last byte of the partial message arrived
        self.broken: FramingError | None = None

    @property
    def size(self) -> int:
        """Bytes held (taken messages excluded)."""
        return len(self._buf) - self._pos

    @property
    def ready(self) -> int:
        """Whole messages waiting to be taken."""
        return len(self._ends) - self._head

    @property
    def ready_bytes(self) -> int:
        """Bytes of the whole messages waiting."""
        return self._scan - self._pos

    def feed(self, data: bytes, now: int) -> None:
        """Append ``data``; find the messages it completes.  A bad ``msg_len`` sets :attr:`broken`."""
        if self.broken is not None or not data:
            return
        self._buf += data
        buf, scan = self._buf, self._scan
        try:
            while scan < len(buf):
                header = self._header(buf, scan)
                if header is None or header > len(buf):
                    break
                scan = header
                self._ends.append(scan)
        except FramingError as exc:
            self.broken = exc
            self._buf = bytearray()
            self._pos = self._scan = self._head = 0
            self._ends = []
            self.partial_since = self.progress_at = None
            return
        completed = scan > self._scan
        self._scan = scan
        if scan < len(buf):
            if self.partial_since is None or completed:
                self.partial_since = now  # the message now partial began arriving in this read
            self.progress_at = now
        else:
            self.partial_since = self.progress_at = None

    @property
    def partial_bytes(self) -> int:
        """Bytes of the message still arriving."""
        return len(self._buf) - self._scan

    def too_slow(self, now: int, frame_timeout: int, min_rate: int) -> str | None:
        """Why the message still arriving counts as a hostile trickle at ``now``, or None while it makes progress."""
        return trickle(now, self.partial_since, self.progress_at, self.partial_bytes, frame_timeout, min_rate)


    def _header(self, buf: bytearray, pos: int) -> int | None:
        """The end of the message starting at ``pos``, or None while its ``msg_len`` is incomplete."""
        header = frame_header(buf, pos, self.limits)
        return None if header is None else header[1] + header[0]

    def take(self) -> AnyMessage | BadMessage | None:
        """The next whole message decoded (a message object, or a :class:`BadMessage`); None if none waits."""
        if self._head == len(self._ends):
            return None
        end = self._ends[self._head]
        self._head += 1
        start = self._pos
        self._pos = end
        if self._head == len(self._ends):
            self._ends.clear()
            self._head = 0
        buf = self._buf
        n, at = read_varint(bytes(buf[start : min(start + 10, end)]), 0)
        payload = bytes(buf[start + at : end])
        if self._pos >= COMPACT_AT or self._pos == len(buf):
            self._compact()
        try:
            return decode_payload(payload, self.framing, self.limits)
        except CableError as exc:
            return BadMessage(exc, *self._peek(payload))

    def _peek(self, payload: bytes) -> tuple[int | None, bytes | None]:
        """The type and ``req_id`` of a payload that did not decode, as far as they can be read."""
        try:
            t, pos = read_varint(payload, 0)
        except DecodeError:
            return None, None
        pos += CIRCUIT_SIZE if self.framing.circuit_id else 0
        end = pos + self.framing.req_id_size
        return t, (payload[pos:end] if end <= len(payload) else None)

    def _compact(self) -> None:
        del self._buf[: self._pos]
        self._scan -= self._pos
        self._ends = [e - self._pos for e in self._ends[self._head :]]
        self._head = 0
        self._pos = 0

    def clear(self) -> None:
        """Drop everything held (the connection closed)."""
        self._buf = bytearray()
        self._pos = self._scan = self._head = 0
        self._ends = []
        self.partial_since = self.progress_at = None


def trickle(now: int, since: int | None, progress_at: int | None, received: int, frame_timeout: int, min_rate: int) -> str | None:
    """Why a message that began arriving at ``since`` (``received`` bytes so far, the last at ``progress_at``) is a hostile trickle.

    The one rule for plain and private connections: no byte for
    ``frame_timeout`` ms, or once it has taken that long, under ``min_rate``
    bytes a second on average.  A message whose bytes keep coming is never slow.
    """
    if since is None:
        return None
    if now - progress_at > frame_timeout:
        return f"no byte of a message for {now - progress_at} ms (limit frame_timeout, {frame_timeout} ms)"
    took = now - since
    if took > frame_timeout and received * 1000 < min_rate * took:
        return f"a message arriving at {received * 1000 // took} bytes/s after {took} ms (limit MIN_MESSAGE_RATE, {min_rate} bytes/s)"
    return None
