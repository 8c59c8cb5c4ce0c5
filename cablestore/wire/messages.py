"""Cable wire messages: requests and responses, their framing, a streaming decoder.

Two framings share one set of message bodies:

* :data:`DEPLOYED` (the default) is what cable.js 0.2.1 and cable-core.js put
  on the wire: ``msg_len`` varint, ``msg_type`` varint, ``circuit_id`` u8[4],
  ``req_id`` u8[4], then ``ttl`` varint on requests.
* :data:`DRAFT8` is spec 1.0-draft8 §6.3.1: ``msg_len``, ``msg_type``,
  ``req_id`` u8[8], no ``circuit_id`` and no ``ttl`` (decoded requests carry
  ``ttl = 0``).  A cancel's ``cancel_id`` takes the ``req_id`` size of the
  framing (draft8's table says u8[4], but it must hold a u8[8] ``req_id``).

Message types (cable.js 0.2.1 numbering): 0 hash response, 1 post response,
2 post request, 3 cancel, 4 channel time range, 5 channel state, 6 channel
list request, 7 channel list response, 8 moderation state request.

Every limit is checked before anything is allocated for it: the message
length against :attr:`Limits.max_message`, hash counts against
:attr:`Limits.max_hashes` and the bytes left, post lengths against
:attr:`Limits.max_post`.  Errors are :class:`~cablestore.errors.MessageError`
(drop the message) or its subclass :class:`~cablestore.errors.FramingError`
(the stream is lost: close the connection).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Union

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
from cablestore.wire.codec import CHANNEL_CODEPOINTS, HASH_SIZE, _str, encode_varint, read_varint

HASH_RESPONSE, POST_RESPONSE, POST_REQUEST, CANCEL_REQUEST = 0, 1, 2, 3
TIME_RANGE_REQUEST, CHANNEL_STATE_REQUEST, CHANNEL_LIST_REQUEST = 4, 5, 6
CHANNEL_LIST_RESPONSE, MODERATION_STATE_REQUEST = 7, 8
MAX_TTL = 16
CIRCUIT_SIZE = 4
NO_CIRCUIT = bytes(CIRCUIT_SIZE)


@dataclass(frozen=True, slots=True)
class Framing:
    """How a message header looks on the wire (see the module docstring)."""

    name: str
    req_id_size: int
    circuit_id: bool
    ttl: bool


DEPLOYED = Framing("deployed", 4, True, True)
DRAFT8 = Framing("draft8", 8, False, False)


@dataclass(frozen=True, slots=True)
class Limits:
    """Caps a decoder enforces before allocating (the spec sets none of these numbers)."""

    max_message: int = 4 << 20
    max_hashes: int = 65_536
    max_post: int = 64 << 10
    max_channels: int = 4096


DEFAULT_LIMITS = Limits()


# --- messages --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Message:
    """Fields every message has.  ``circuit_id`` exists only in the deployed framing."""

    req_id: bytes
    msg_type: ClassVar[int] = -1
    is_request: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class Request(Message):
    """A request; ``ttl`` is how many more hops it may be forwarded."""

    is_request: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class HashResponse(Message):
    """Hashes answering a request; no hashes concludes it."""

    hashes: tuple[bytes, ...] = ()
    circuit_id: bytes = NO_CIRCUIT
    msg_type: ClassVar[int] = HASH_RESPONSE

    @property
    def concludes(self) -> bool:
        """True for the empty response that ends a request (spec 6.3.3)."""
        return not self.hashes


@dataclass(frozen=True, slots=True)
class PostResponse(Message):
    """Posts (their bytes) answering a post request; no posts concludes it."""

    posts: tuple[bytes, ...] = ()
    circuit_id: bytes = NO_CIRCUIT
    msg_type: ClassVar[int] = POST_RESPONSE

    @property
    def concludes(self) -> bool:
        """True for the empty response that ends a request (spec 6.3.3)."""
        return not self.posts


@dataclass(frozen=True, slots=True)
class ChannelListResponse(Message):
    """Channel names; the only response to a channel list request, so it always concludes."""

    channels: tuple[str, ...] = ()
    circuit_id: bytes = NO_CIRCUIT
    msg_type: ClassVar[int] = CHANNEL_LIST_RESPONSE
    concludes: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class PostRequest(Request):
    """Ask for posts by hash."""

    hashes: tuple[bytes, ...] = ()
    ttl: int = 0
    circuit_id: bytes = NO_CIRCUIT
    msg_type: ClassVar[int] = POST_REQUEST


@dataclass(frozen=True, slots=True)
class CancelRequest(Request):
    """End the live request ``cancel_id``; nothing answers it."""

    cancel_id: bytes = b""
    ttl: int = 0
    circuit_id: bytes = NO_CIRCUIT
    msg_type: ClassVar[int] = CANCEL_REQUEST


@dataclass(frozen=True, slots=True)
class TimeRangeRequest(Request):
    """post/text and post/delete hashes of a channel in ``[time_start, time_end)``; ``time_end = 0`` stays live."""

    channel: str = ""
    time_start: int = 0
    time_end: int = 0
    limit: int = 0
    ttl: int = 0
    circuit_id: bytes = NO_CIRCUIT
    msg_type: ClassVar[int] = TIME_RANGE_REQUEST


@dataclass(frozen=True, slots=True)
class ChannelStateRequest(Request):
    """A channel's state hashes; ``future = 1`` keeps pushing changes."""

    channel: str = ""
    future: int = 0
    ttl: int = 0
    circuit_id: bytes = NO_CIRCUIT
    msg_type: ClassVar[int] = CHANNEL_STATE_REQUEST


@dataclass(frozen=True, slots=True)
class ChannelListRequest(Request):
    """Known channel names, ``offset`` skipped, at most ``limit`` (0 = all)."""

    offset: int = 0
    limit: int = 0
    ttl: int = 0
    circuit_id: bytes = NO_CIRCUIT
    msg_type: ClassVar[int] = CHANNEL_LIST_REQUEST


@dataclass(frozen=True, slots=True)
class ModerationStateRequest(Request):
    """cable.js 0.2.1's moderation state request (decoded; answered with an empty hash response)."""

    channels: tuple[str, ...] = ()
    future: int = 0
    oldest: int = 0
    ttl: int = 0
    circuit_id: bytes = NO_CIRCUIT
    msg_type: ClassVar[int] = MODERATION_STATE_REQUEST


AnyMessage = Union[
    HashResponse,
    PostResponse,
    ChannelListResponse,
    PostRequest,
    CancelRequest,
    TimeRangeRequest,
    ChannelStateRequest,
    ChannelListRequest,
    ModerationStateRequest,
]


# --- encoding ----------------------------------------------------------------


def _hashes(hashes) -> list[bytes]:
    if any(len(h) != HASH_SIZE for h in hashes):
        raise LimitError("hashes must be 32 bytes each")
    return [encode_varint(len(hashes)), *hashes]


def _channel(name: str) -> bytes:
    _check_channel(name)
    return _str(name)


def _check_channel(name: str) -> None:
    lo, hi = CHANNEL_CODEPOINTS
    if not isinstance(name, str) or not lo <= len(name) <= hi:
        raise LimitError(f"channel name must be {lo}-{hi} codepoints")


def _future(value: int) -> bytes:
    if value not in (0, 1):
        raise LimitError(f"future must be 0 or 1, got {value}")
    return encode_varint(value)


def _body(m: AnyMessage) -> list[bytes]:
    t = m.msg_type
    if t in (HASH_RESPONSE, POST_REQUEST):
        return _hashes(m.hashes)
    if t == POST_RESPONSE:
        parts = []
        for post in m.posts:
            if not post:
                raise LimitError("a post in a post response cannot be empty")
            parts += [encode_varint(len(post)), post]
        return [*parts, b"\x00"]
    if t == CHANNEL_LIST_RESPONSE:
        return [*(_channel(c) for c in m.channels), b"\x00"]
    if t == CANCEL_REQUEST:
        return [m.cancel_id]
    if t == TIME_RANGE_REQUEST:
        return [_channel(m.channel), encode_varint(m.time_start), encode_varint(m.time_end), encode_varint(m.limit)]
    if t == CHANNEL_STATE_REQUEST:
        return [_channel(m.channel), _future(m.future)]
    if t == CHANNEL_LIST_REQUEST:
        return [encode_varint(m.offset), encode_varint(m.limit)]
    if t == MODERATION_STATE_REQUEST:
        return [*(_channel(c) for c in m.channels), b"\x00", _future(m.future), encode_varint(m.oldest)]
    raise UnknownMessageTypeError(f"cannot encode message type {t}")


def encode(m: AnyMessage, framing: Framing = DEPLOYED) -> bytes:
    """The message's bytes, ``msg_len`` included.  Refuses what a decoder would refuse."""
    if len(m.req_id) != framing.req_id_size:
        raise LimitError(f"req_id must be {framing.req_id_size} bytes in the {framing.name} framing")
    head = [encode_varint(m.msg_type)]
    if framing.circuit_id:
        if len(m.circuit_id) != CIRCUIT_SIZE:
            raise LimitError("circuit_id must be 4 bytes")
        head.append(m.circuit_id)
    head.append(m.req_id)
    if m.is_request and framing.ttl:
        if not 0 <= m.ttl <= MAX_TTL:
            raise TtlError(f"ttl must be 0-{MAX_TTL}, got {m.ttl}")
        head.append(encode_varint(m.ttl))
    if m.msg_type == CANCEL_REQUEST and len(m.cancel_id) != framing.req_id_size:
        raise LimitError(f"cancel_id must be {framing.req_id_size} bytes")
    payload = b"".join(head + _body(m))
    return encode_varint(len(payload)) + payload


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
        _check_channel(name)
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
    return ModerationStateRequest(req_id, r.channels(), r.future(), r.varint(), **head)


def decode_payload(payload: bytes, framing: Framing = DEPLOYED, limits: Limits = DEFAULT_LIMITS) -> AnyMessage:
    """Decode a message without its ``msg_len`` (the bytes ``msg_len`` counts)."""
    r = _Reader(bytes(payload), 0, limits)
    t = r.varint()
    if t > MODERATION_STATE_REQUEST:
        raise UnknownMessageTypeError(f"unknown message type {t}")
    head = {}
    if framing.circuit_id:
        head["circuit_id"] = r.fixed(CIRCUIT_SIZE, "circuit_id")
    req_id = r.fixed(framing.req_id_size, "req_id")
    if t >= POST_REQUEST and t != CHANNEL_LIST_RESPONSE and framing.ttl:
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
                header = self._header(buf, pos)
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

    def _header(self, buf: bytearray, pos: int) -> tuple[int, int] | None:
        """``(msg_len, payload start)``, or None while the varint is incomplete."""
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
        if n > self.limits.max_message:
            raise MessageTooLargeError(f"message of {n} bytes, limit {self.limits.max_message}")
        if n == 0:
            raise FramingError("msg_len 0: no message type")
        return n, pos + start


def messages_from_json(obj: dict) -> AnyMessage:
    """Build a message from a cable.js test-vector object (hex strings for bytes)."""
    t = obj["msg_type"]
    common = {"req_id": bytes.fromhex(obj["req_id"]), "circuit_id": bytes.fromhex(obj.get("circuit_id", "00000000"))}
    hashes = tuple(bytes.fromhex(h) for h in obj.get("hashes", ()))
    if t == HASH_RESPONSE:
        return HashResponse(hashes=hashes, **common)
    if t == POST_RESPONSE:
        return PostResponse(posts=tuple(bytes.fromhex(p) for p in obj["posts"]), **common)
    if t == CHANNEL_LIST_RESPONSE:
        return ChannelListResponse(channels=tuple(obj["channels"]), **common)
    common["ttl"] = obj.get("ttl", 0)
    if t == POST_REQUEST:
        return PostRequest(hashes=hashes, **common)
    if t == CANCEL_REQUEST:
        return CancelRequest(cancel_id=bytes.fromhex(obj["cancel_id"]), **common)
    if t == TIME_RANGE_REQUEST:
        return TimeRangeRequest(channel=obj["channel"], time_start=obj["time_start"], time_end=obj["time_end"], limit=obj["limit"], **common)
    if t == CHANNEL_STATE_REQUEST:
        return ChannelStateRequest(channel=obj["channel"], future=obj["future"], **common)
    if t == CHANNEL_LIST_REQUEST:
        return ChannelListRequest(offset=obj["offset"], limit=obj["limit"], **common)
    if t == MODERATION_STATE_REQUEST:
        return ModerationStateRequest(channels=tuple(obj["channels"]), future=obj["future"], oldest=obj["oldest"], **common)
    raise UnknownMessageTypeError(f"unknown message type {t}")
