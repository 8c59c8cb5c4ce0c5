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
list request, 7 channel list response, 8 moderation state request; and
cablestore's extension (docs/reconcile.md, above 255 as wire.md §6.3.1
allows): 256 reconcile request, 257 reconcile response, 258 state changes
request, 259 chat changes request.

Every limit is checked before anything is allocated for it: the message
length against :attr:`Limits.max_message`, hash counts against
:attr:`Limits.max_hashes` and the bytes left, post lengths against
:attr:`Limits.max_post`.  Errors are :class:`cablestore.errors.MessageError`
(drop the message) or its subclass :class:`cablestore.errors.FramingError`
(the stream is lost: close the connection).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from cablestore.errors import (
    LimitError,
    TtlError,
    UnknownMessageTypeError,
)
from cablestore.wire.fields import CHANNEL_CODEPOINTS, HASH_SIZE, encode_str, encode_varint

HASH_RESPONSE, POST_RESPONSE, POST_REQUEST, CANCEL_REQUEST = 0, 1, 2, 3
TIME_RANGE_REQUEST, CHANNEL_STATE_REQUEST, CHANNEL_LIST_REQUEST = 4, 5, 6
CHANNEL_LIST_RESPONSE, MODERATION_STATE_REQUEST = 7, 8
RECONCILE_REQUEST, RECONCILE_RESPONSE, STATE_CHANGES_REQUEST, CHAT_CHANGES_REQUEST = 256, 257, 258, 259  # the set reconciliation extension
SCOPE_HISTORY, SCOPE_STATE = 0, 1  # what a reconcile request reconciles of its channel
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


@dataclass(frozen=True, slots=True)
class ReconcileRequest(Request):
    """One round of set reconciliation (docs/reconcile.md) of a channel's ``scope``.

    ``scope``: :data:`SCOPE_HISTORY` (the hashes a time range request from 0
    lists) or :data:`SCOPE_STATE` (a channel state answer).  An empty
    ``channel`` and ``message`` is the probe: a peer that speaks the
    extension answers it with its version.
    """

    channel: str = ""
    scope: int = SCOPE_HISTORY
    message: bytes = b""
    ttl: int = 0
    circuit_id: bytes = NO_CIRCUIT
    msg_type: ClassVar[int] = RECONCILE_REQUEST

    @property
    def is_probe(self) -> bool:
        """True for the probe (no channel, no message)."""
        return not self.channel and not self.message


@dataclass(frozen=True, slots=True)
class ReconcileResponse(Message):
    """The answer to one reconcile request: the next reconciliation message; empty: refused (use native requests)."""

    message: bytes = b""
    circuit_id: bytes = NO_CIRCUIT
    msg_type: ClassVar[int] = RECONCILE_RESPONSE
    concludes: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class StateChangesRequest(Request):
    """A channel state request with ``future = 1`` but no first answer: only the changes from now on (the extension's;
    a peer that reconciled the channel's state holds the answer already)."""

    channel: str = ""
    ttl: int = 0
    circuit_id: bytes = NO_CIRCUIT
    msg_type: ClassVar[int] = STATE_CHANGES_REQUEST


@dataclass(frozen=True, slots=True)
class ChatChangesRequest(TimeRangeRequest):
    """A live time range request (``time_end = 0``) without its first answer: only the chat posts stored from now on
    whose timestamp is at least ``time_start`` (the extension's; a peer that reconciled the channel holds the rest)."""

    msg_type: ClassVar[int] = CHAT_CHANGES_REQUEST


AnyMessage = (
    HashResponse
    | PostResponse
    | ChannelListResponse
    | PostRequest
    | CancelRequest
    | TimeRangeRequest
    | ChannelStateRequest
    | ChannelListRequest
    | ModerationStateRequest
    | ReconcileRequest
    | ReconcileResponse
    | StateChangesRequest
    | ChatChangesRequest
)


# --- encoding ----------------------------------------------------------------


def _hashes(hashes) -> list[bytes]:
    if any(len(h) != HASH_SIZE for h in hashes):
        raise LimitError("hashes must be 32 bytes each")
    return [encode_varint(len(hashes)), *hashes]


def _channel(name: str) -> bytes:
    check_channel(name)
    return encode_str(name)


def check_channel(name: str) -> None:
    """Refuse (:class:`cablestore.errors.LimitError`) a channel name that is not a string of 1-64 codepoints."""
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
    if t == RECONCILE_REQUEST:
        return _reconcile_request(m)
    if t == RECONCILE_RESPONSE:
        return [encode_varint(len(m.message)), m.message]
    if t == STATE_CHANGES_REQUEST:
        return [_channel(m.channel)]
    if t == CHAT_CHANGES_REQUEST:
        if m.time_end or m.limit:
            raise LimitError("a chat changes request has no time_end and no limit")
        return [_channel(m.channel), encode_varint(m.time_start)]
    raise UnknownMessageTypeError(f"cannot encode message type {t}")


def _reconcile_request(m: ReconcileRequest) -> list[bytes]:
    if m.scope not in (SCOPE_HISTORY, SCOPE_STATE):
        raise LimitError(f"reconcile scope must be {SCOPE_HISTORY} or {SCOPE_STATE}, got {m.scope}")
    if m.channel or m.message:  # else the probe
        check_channel(m.channel)
        if not m.message:
            raise LimitError("a reconcile request of a channel needs a message")
    return [encode_str(m.channel), encode_varint(m.scope), encode_varint(len(m.message)), m.message]


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
