"""Decoding Cable wire messages: one message (:func:`decode`), or a stream of
them (:class:`Decoder`), in either framing of :mod:`cablestore.wire.messages`.

Every limit is checked before anything is allocated for it: the message
length against :attr:`cablestore.wire.messages.Limits.max_message`, hash
counts against :attr:`cablestore.wire.messages.Limits.max_hashes` and the
bytes left, post lengths against
:attr:`cablestore.wire.messages.Limits.max_post`.  Errors are
:class:`cablestore.errors.MessageError` (drop the message) or its subclass
:class:`cablestore.errors.FramingError` (the stream is lost: close the
connection).
"""

from __future__ import annotations

from cablestore.errors import (
    CableError,
    DecodeError,
    FramingError,
    LimitError,
    MessageError,
    MessageTooLargeError,
    TtlError,
    UnknownMessageTypeError,
)
from cablestore.wire.codec import HASH_SIZE, read_varint
from cablestore.wire.messages import (
    CANCEL_REQUEST,
    CHANNEL_LIST_REQUEST,
    CHANNEL_LIST_RESPONSE,
    CHANNEL_STATE_REQUEST,
    CHAT_CHANGES_REQUEST,
    CIRCUIT_SIZE,
    DEFAULT_LIMITS,
    DEPLOYED,
    HASH_RESPONSE,
    MAX_TTL,
    MODERATION_STATE_REQUEST,
    POST_REQUEST,
    POST_RESPONSE,
    RECONCILE_REQUEST,
    RECONCILE_RESPONSE,
    SCOPE_STATE,
    STATE_CHANGES_REQUEST,
    TIME_RANGE_REQUEST,
    AnyMessage,
    CancelRequest,
    ChannelListRequest,
    ChannelListResponse,
    ChannelStateRequest,
    ChatChangesRequest,
    Framing,
    HashResponse,
    Limits,
    ModerationStateRequest,
    PostRequest,
    PostResponse,
    ReconcileRequest,
    ReconcileResponse,
    StateChangesRequest,
    TimeRangeRequest,
    check_channel,
)

# --- decoding ----------------------------------------------------------------


class _Reader:
    """Reads the fields of one message body; every failure is a MessageError."""

    __slots__ = ("buf", "pos", "limits")

    def __init__(self, buf: bytes, pos: int, limits: Limits):
        self.buf, self.pos, self.limits = buf, pos, limits

    def varint(self) -> int:
        try:
            value, self.pos = read_varint(self.buf, self.pos)
        except DecodeError as exc:
            raise MessageError(f"bad varint: {exc}") from exc
        return value

    def fixed(self, n: int, what: str) -> bytes:
        end = self.pos + n
        if end > len(self.buf):
            raise MessageError(f"message ends inside {what}")
        out = self.buf[self.pos : end]
        self.pos = end
        return out

    def hashes(self) -> tuple[bytes, ...]:
        count = self.varint()
        if count > self.limits.max_hashes:
            raise LimitError(f"{count} hashes in one message, limit {self.limits.max_hashes}")
        raw = self.fixed(count * HASH_SIZE, f"{count} hashes")
        return tuple(raw[i : i + HASH_SIZE] for i in range(0, len(raw), HASH_SIZE))

    def string(self, what: str, n: int | None = None) -> str:
        n = self.varint() if n is None else n
        raw = self.fixed(n, what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MessageError(f"{what} is not valid UTF-8") from exc

    def channel(self, n: int | None = None) -> str:
        name = self.string("channel name", n)
        check_channel(name)
        return name

    def channels(self) -> tuple[str, ...]:
        """Channel names up to a zero length."""
        out = []
        while (n := self.varint()) != 0:
            if len(out) == self.limits.max_channels:
                raise LimitError(f"more than {self.limits.max_channels} channels in one message")
            out.append(self.channel(n))
        return tuple(out)

    def posts(self) -> tuple[bytes, ...]:
        out = []
        while (n := self.varint()) != 0:
            if n > self.limits.max_post:
                raise LimitError(f"a {n}-byte post in a post response, limit {self.limits.max_post}")
            out.append(self.fixed(n, "a post"))
        return tuple(out)

    def blob(self, what: str) -> bytes:
        """A varint length, then that many bytes (bounded by the message's own length)."""
        return self.fixed(self.varint(), what)

    def future(self) -> int:
        value = self.varint()
        if value not in (0, 1):
            raise LimitError(f"future must be 0 or 1, got {value}")
        return value


def _decode_fields(t: int, r: _Reader, req_id: bytes, head: dict) -> AnyMessage:
    if t == HASH_RESPONSE:
        return HashResponse(req_id, r.hashes(), **head)
    if t == POST_RESPONSE:
        return PostResponse(req_id, r.posts(), **head)
    if t == CHANNEL_LIST_RESPONSE:
        return ChannelListResponse(req_id, r.channels(), **head)
    if t == POST_REQUEST:
        return PostRequest(req_id, r.hashes(), **head)
    if t == CANCEL_REQUEST:
        return CancelRequest(req_id, r.fixed(len(req_id), "cancel_id"), **head)
    if t == TIME_RANGE_REQUEST:
        return TimeRangeRequest(req_id, r.channel(), r.varint(), r.varint(), r.varint(), **head)
    if t == CHANNEL_STATE_REQUEST:
        return ChannelStateRequest(req_id, r.channel(), r.future(), **head)
    if t == CHANNEL_LIST_REQUEST:
        return ChannelListRequest(req_id, r.varint(), r.varint(), **head)
    if t == MODERATION_STATE_REQUEST:
        return ModerationStateRequest(req_id, r.channels(), r.future(), r.varint(), **head)
    if t == RECONCILE_REQUEST:
        return _reconcile_request(r, req_id, head)
    if t == STATE_CHANGES_REQUEST:
        return StateChangesRequest(req_id, r.channel(), **head)
    if t == CHAT_CHANGES_REQUEST:
        return ChatChangesRequest(req_id, r.channel(), r.varint(), **head)
    return ReconcileResponse(req_id, r.blob("a reconciliation message"), **head)


def _reconcile_request(r: _Reader, req_id: bytes, head: dict) -> ReconcileRequest:
    channel = r.string("channel name")
    scope = r.varint()
    if scope > SCOPE_STATE:
        raise LimitError(f"unknown reconcile scope {scope}")
    message = r.blob("a reconciliation message")
    if channel or message:  # else the probe
        check_channel(channel)
        if not message:
            raise LimitError("a reconcile request of a channel without a message")
    return ReconcileRequest(req_id, channel, scope, message, **head)


def decode_payload(payload: bytes, framing: Framing = DEPLOYED, limits: Limits = DEFAULT_LIMITS) -> AnyMessage:
    """Decode a message without its ``msg_len`` (the bytes ``msg_len`` counts)."""
    r = _Reader(bytes(payload), 0, limits)
    t = r.varint()
    if t > MODERATION_STATE_REQUEST and t not in (RECONCILE_REQUEST, RECONCILE_RESPONSE, STATE_CHANGES_REQUEST, CHAT_CHANGES_REQUEST):
        raise UnknownMessageTypeError(f"unknown message type {t}")
    head = {}
    if framing.circuit_id:
        head["circuit_id"] = r.fixed(CIRCUIT_SIZE, "circuit_id")
    req_id = r.fixed(framing.req_id_size, "req_id")
    if t >= POST_REQUEST and t not in (CHANNEL_LIST_RESPONSE, RECONCILE_RESPONSE) and framing.ttl:
        head["ttl"] = r.varint()
        if head["ttl"] > MAX_TTL:
            raise TtlError(f"ttl {head['ttl']} exceeds {MAX_TTL}")
    m = _decode_fields(t, r, req_id, head)
    if r.pos != len(r.buf):
        raise MessageError(f"{len(r.buf) - r.pos} bytes left after a message of type {t}")
    return m


def decode(buf: bytes, framing: Framing = DEPLOYED, limits: Limits = DEFAULT_LIMITS) -> AnyMessage:
    """Decode exactly one whole message, ``msg_len`` included."""
    buf = bytes(buf)
    try:
        n, pos = read_varint(buf, 0)
    except DecodeError as exc:
        raise FramingError(f"bad msg_len: {exc}") from exc
    if n > limits.max_message:
        raise MessageTooLargeError(f"message of {n} bytes, limit {limits.max_message}")
    if pos + n != len(buf):
        raise MessageError(f"msg_len says {n} bytes, {len(buf) - pos} given")
    return decode_payload(buf[pos:], framing, limits)


class Decoder:
    """Splits a byte stream into messages: feed whatever a read returned, then iterate.

    ``decoder.feed(data)`` returns each complete message, or the
    :class:`CableError` that a malformed one raised (its bytes are skipped,
    the stream goes on).  A :class:`FramingError` (bad or oversized
    ``msg_len``) is yielded once and the decoder is then ``broken``: close
    the connection.  Nothing is buffered beyond ``limits.max_message``.
    """

    def __init__(self, framing: Framing = DEPLOYED, limits: Limits = DEFAULT_LIMITS):
        self.framing = framing
        self.limits = limits
        self._buf = bytearray()
        self.broken: FramingError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete message."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[AnyMessage | CableError]:
        """Buffer ``data``; return the messages (or per-message errors) it completed."""
        if self.broken is not None:
            return []
        buf = self._buf
        buf += data
        out: list = []
        pos = 0
        try:
            while pos < len(buf):
                header = frame_header(buf, pos, self.limits)
                if header is None:
                    break
                n, start = header
                if start + n > len(buf):
                    break
                payload = bytes(buf[start : start + n])
                pos = start + n
                try:
                    out.append(decode_payload(payload, self.framing, self.limits))
                except CableError as exc:  # a bad body: skip its frame, keep the stream
                    out.append(exc)
        except FramingError as exc:
            self.broken = exc
            self._buf = bytearray()
            out.append(exc)
            return out
        del buf[:pos]
        return out


def frame_header(buf: bytearray, pos: int, limits: Limits) -> tuple[int, int] | None:
    """``(msg_len, payload start)`` of the message framed at ``pos``, or None while its varint is incomplete.

    Refuses (:class:`cablestore.errors.FramingError`) a varint over 10 bytes, a non-minimal one, a length
    over ``limits.max_message`` or of 0: both stream decoders (this module's and the peer's inbox) use it.
    """
    end = min(len(buf), pos + 10)
    for i in range(pos, end):
        if buf[i] < 0x80:
            break
    else:
        if end - pos >= 10:
            raise FramingError("msg_len varint longer than 10 bytes")
        return None
    try:
        n, start = read_varint(bytes(buf[pos : i + 1]), 0)
    except DecodeError as exc:
        raise FramingError(f"bad msg_len: {exc}") from exc
    if n > limits.max_message:
        raise MessageTooLargeError(f"message of {n} bytes, limit {limits.max_message}")
    if n == 0:
        raise FramingError("msg_len 0: no message type")
    return n, pos + start
