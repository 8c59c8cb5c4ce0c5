"""Encode and decode Cable posts (spec 1.0-draft8, wire-compatible with cable.js 0.2.1).

A post is a header (public key, signature, links, post type, timestamp)
followed by a body that depends on the post type.  Decoding is strict: the
result re-encodes to exactly the input bytes, so a post's hash and signature
stay meaningful after a round trip.  That is why non-minimal varints are
refused even though LEB128 readers usually accept them.

``post/info`` uses the deployed form (cable.js 0.2.1 and the Rust crate):
key/value pairs terminated by a zero key length.  Spec draft8 instead prefixes
a ``num_keypairs`` count; such a post does not parse as the deployed form
(the count is read as a key length and the rest no longer lines up), so it is
refused with a :class:`DecodeError` and never written.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from cablestore.errors import (
    LimitError,
    PostFieldError,
    TrailingBytesError,
    TruncatedError,
    UnknownPostTypeError,
    Utf8Error,
    VarintError,
)

TEXT, DELETE, INFO, TOPIC, JOIN, LEAVE = range(6)
POST_TYPE_NAMES = {
    TEXT: "post/text",
    DELETE: "post/delete",
    INFO: "post/info",
    TOPIC: "post/topic",
    JOIN: "post/join",
    LEAVE: "post/leave",
}
CHANNEL_TYPES = frozenset({TEXT, TOPIC, JOIN, LEAVE})

PUBLIC_KEY_SIZE = 32
SIGNATURE_SIZE = 64
HASH_SIZE = 32
HEADER_FIXED = PUBLIC_KEY_SIZE + SIGNATURE_SIZE
U64_MAX = (1 << 64) - 1

# Limits from the spec (see shared DESIGN notes); codepoints unless stated.
MAX_TEXT_BYTES = 4096
CHANNEL_CODEPOINTS = (1, 64)
MAX_TOPIC_CODEPOINTS = 512
INFO_KEY_CODEPOINTS = (1, 128)
MAX_INFO_VALUE_BYTES = 4096
NAME_CODEPOINTS = (1, 32)


@dataclass(frozen=True, slots=True, repr=False)
class Post:
    """A decoded Cable post.  Body fields not used by its type are ``None``.

    ``info`` is a tuple of ``(key, value)`` string pairs in wire order.
    """

    public_key: bytes
    signature: bytes
    links: tuple[bytes, ...]
    post_type: int
    timestamp: int
    channel: str | None = None
    text: str | None = None
    hashes: tuple[bytes, ...] | None = None
    info: tuple[tuple[str, str], ...] | None = None
    topic: str | None = None

    @property
    def type_name(self) -> str:
        """The spec's name of the post type, e.g. ``"post/text"``."""
        return POST_TYPE_NAMES.get(self.post_type, f"post type {self.post_type}")

    def __repr__(self) -> str:
        # Keys and signatures as short hex: the full bytes make a repr unreadable.
        fields = [f"{self.type_name}", f"author={self.public_key.hex()[:12]}", f"timestamp={self.timestamp}"]
        for name in ("channel", "text", "topic"):
            value = getattr(self, name)
            if value is not None:
                fields.append(f"{name}={value if len(value) <= 40 else value[:39] + '…'!r}")
        if self.info is not None:
            fields.append(f"info={dict(self.info)!r}")
        if self.hashes is not None:
            fields.append(f"deletes=[{', '.join(h.hex()[:12] for h in self.hashes)}]")
        if self.links:
            fields.append(f"links={len(self.links)}")
        return f"Post({', '.join(fields)})"

    def info_value(self, key: str) -> str | None:
        """The value of ``key`` in a post/info (the last one if repeated)."""
        found = None
        for k, v in self.info or ():
            if k == key:
                found = v
        return found


# --- varints -------------------------------------------------------------


def encode_varint(n: int) -> bytes:
    """``n`` (0 to 2**64 - 1) as a minimal unsigned LEB128 varint."""
    if n < 0 or n > U64_MAX:
        raise LimitError(f"varint out of range: {n}")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Read an unsigned LEB128 varint at ``pos``; return ``(value, new_pos)``."""
    end = len(buf)
    if pos >= end:
        raise TruncatedError("varint runs past the end of the buffer")
    b = buf[pos]
    if b < 0x80:  # the common one-byte case
        return b, pos + 1
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise TruncatedError("varint runs past the end of the buffer")
        if pos - start >= 10:
            raise VarintError("varint longer than 10 bytes")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    if b == 0:
        raise VarintError("non-minimal varint encoding")
    if result > U64_MAX:
        raise VarintError("varint overflows u64")
    return result, pos


# --- decoding ------------------------------------------------------------


def _read_str(buf: bytes, pos: int, what: str) -> tuple[str, int, int]:
    """Return ``(string, byte_length, new_pos)`` for a length-prefixed UTF-8 string."""
    if pos < len(buf) and buf[pos] < 0x80:  # a one-byte length, read inline (hot)
        n = buf[pos]
        pos += 1
    else:
        n, pos = read_varint(buf, pos)
    end = pos + n
    if end > len(buf):
        raise TruncatedError(f"{what}: declared length {n} exceeds the buffer")
    try:
        return buf[pos:end].decode("utf-8"), n, end
    except UnicodeDecodeError as exc:
        raise Utf8Error(f"{what} is not valid UTF-8") from exc


def _read_hashes(buf: bytes, pos: int, what: str) -> tuple[tuple[bytes, ...], int]:
    count, pos = read_varint(buf, pos)
    # Checked before slicing so a huge count never allocates anything.
    if count * HASH_SIZE > len(buf) - pos:
        raise TruncatedError(f"{what}: {count} hashes exceed the buffer")
    hashes = tuple(buf[pos + i * HASH_SIZE : pos + (i + 1) * HASH_SIZE] for i in range(count))
    return hashes, pos + count * HASH_SIZE


def _check_codepoints(value: str, bounds: tuple[int, int], what: str) -> None:
    lo, hi = bounds
    if not lo <= len(value) <= hi:
        raise LimitError(f"{what} must be {lo}-{hi} codepoints, got {len(value)}")


def _read_channel(buf: bytes, pos: int) -> tuple[str, int]:
    channel, _, pos = _read_str(buf, pos, "channel")
    if not CHANNEL_CODEPOINTS[0] <= len(channel) <= CHANNEL_CODEPOINTS[1]:
        _check_codepoints(channel, CHANNEL_CODEPOINTS, "channel name")  # raises
    return channel, pos


def _read_info(buf: bytes, pos: int) -> tuple[tuple[tuple[str, str], ...], int]:
    pairs = []
    while True:
        key, key_len, pos = _read_str(buf, pos, "info key")
        if key_len == 0:
            return tuple(pairs), pos
        _check_codepoints(key, INFO_KEY_CODEPOINTS, "info key")
        value, value_len, pos = _read_str(buf, pos, "info value")
        if value_len > MAX_INFO_VALUE_BYTES:
            raise LimitError(f"info value is {value_len} bytes, limit {MAX_INFO_VALUE_BYTES}")
        if key == "name":
            _check_codepoints(value, NAME_CODEPOINTS, "user name")
        pairs.append((key, value))


def decode_post(buf: bytes) -> Post:
    """Decode and validate one post.  Raises only :class:`CableError` subclasses."""
    if type(buf) is not bytes:
        if not isinstance(buf, (bytes, bytearray, memoryview)):
            raise TypeError("decode_post expects bytes")
        buf = bytes(buf)
    # The common cases (one-byte counts and lengths) are read inline: decoding
    # runs once per post on every ingest, reindex and rebuild.  Every other
    # case goes through the same helpers and raises the same errors.
    n = len(buf)
    if n < HEADER_FIXED:
        raise TruncatedError("shorter than a post header")
    if n > HEADER_FIXED and buf[HEADER_FIXED] == 1 and n >= HEADER_FIXED + 1 + HASH_SIZE:
        links: tuple[bytes, ...] = (buf[HEADER_FIXED + 1 : HEADER_FIXED + 1 + HASH_SIZE],)
        pos = HEADER_FIXED + 1 + HASH_SIZE
    else:
        links, pos = _read_hashes(buf, HEADER_FIXED, "links")
    if pos < n and buf[pos] < 0x80:
        post_type = buf[pos]
        pos += 1
    else:
        post_type, pos = read_varint(buf, pos)
    if post_type not in POST_TYPE_NAMES:
        raise UnknownPostTypeError(f"unknown post type {post_type}")
    timestamp, pos = read_varint(buf, pos)
    channel = text = hashes = info = topic = None
    if post_type == TEXT:
        channel, pos = _read_channel(buf, pos)
        text, text_len, pos = _read_str(buf, pos, "text")
        if text_len > MAX_TEXT_BYTES:
            raise LimitError(f"text is {text_len} bytes, limit {MAX_TEXT_BYTES}")
    elif post_type == DELETE:
        hashes, pos = _read_hashes(buf, pos, "deletions")
        if not hashes:
            raise LimitError("post/delete must name at least one hash")
    elif post_type == INFO:
        info, pos = _read_info(buf, pos)
    elif post_type == TOPIC:
        channel, pos = _read_channel(buf, pos)
        topic, _, pos = _read_str(buf, pos, "topic")
        if len(topic) > MAX_TOPIC_CODEPOINTS:
            raise LimitError(f"topic exceeds {MAX_TOPIC_CODEPOINTS} codepoints")
    else:  # JOIN, LEAVE
        channel, pos = _read_channel(buf, pos)
    if pos != n:
        raise TrailingBytesError(f"{n - pos} trailing bytes after the post")
    return _new_post(buf[:PUBLIC_KEY_SIZE], buf[PUBLIC_KEY_SIZE:HEADER_FIXED], links, post_type, timestamp, channel, text, hashes, info, topic)


def slot_setters(cls) -> tuple:
    """The slot setters of a frozen slotted dataclass, in field order, for hot-path constructors.

    A frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``; calling the slots' own setters is about twice as
    fast.  A constructor using them must set every field exactly once.
    """
    return tuple(cls.__dict__[name].__set__ for name in cls.__dataclass_fields__)


_POST_SETTERS = slot_setters(Post)
assert len(_POST_SETTERS) == 10


def _new_post(public_key, signature, links, post_type, timestamp, channel, text, hashes, info, topic) -> Post:
    """``Post(...)`` with every field given, without the frozen ``__init__``'s cost (decoding is hot)."""
    post = object.__new__(Post)
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9 = _POST_SETTERS
    s0(post, public_key)
    s1(post, signature)
    s2(post, links)
    s3(post, post_type)
    s4(post, timestamp)
    s5(post, channel)
    s6(post, text)
    s7(post, hashes)
    s8(post, info)
    s9(post, topic)
    return post


# --- encoding ------------------------------------------------------------


def _str(value: str) -> bytes:
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError as exc:  # lone surrogates have no UTF-8 form
        raise Utf8Error(f"string is not encodable as UTF-8: {exc}") from exc
    return encode_varint(len(raw)) + raw


_BODY_FIELDS = {
    TEXT: ("channel", "text"),
    DELETE: ("hashes",),
    INFO: ("info",),
    TOPIC: ("channel", "topic"),
    JOIN: ("channel",),
    LEAVE: ("channel",),
}


def _is_u64(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_fields(post: Post) -> None:
    """Refuse a post whose fields are missing or of the wrong type, before encoding.

    Raises :class:`PostFieldError` (a wrong kind of value) or
    :class:`UnknownPostTypeError`; limits are checked by decoding the result.
    """
    t = post.post_type
    if not _is_u64(t) or t not in POST_TYPE_NAMES:
        raise UnknownPostTypeError(f"unknown post type {t!r}")
    if not _is_u64(post.timestamp):
        raise PostFieldError(f"timestamp must be an integer (ms since the epoch), got {post.timestamp!r}")
    _check_hash_list(post.links, "links")
    for name in _BODY_FIELDS[t]:
        value = getattr(post, name)
        if value is None:
            raise PostFieldError(f"{POST_TYPE_NAMES[t]} needs {name}=")
        if name == "hashes":
            _check_hash_list(value, "hashes")
        elif name == "info":
            _check_info(value)
        elif not isinstance(value, str):
            raise PostFieldError(f"{name} must be a string, got {type(value).__name__}")
    unused = [n for n in ("channel", "text", "hashes", "info", "topic") if n not in _BODY_FIELDS[t] and getattr(post, n) is not None]
    if unused:
        raise PostFieldError(f"{POST_TYPE_NAMES[t]} has no field {', '.join(unused)}")


def _check_hash_list(value, what: str) -> None:
    if isinstance(value, (bytes, str)) or not isinstance(value, (tuple, list)):
        raise PostFieldError(f"{what} must be a list of 32-byte hashes, got {type(value).__name__}")
    if not all(isinstance(h, bytes) for h in value):
        raise PostFieldError(f"{what} must hold bytes")


def _check_info(value) -> None:
    # A dict cannot say what a repeated key or the wire order is; ask for pairs.
    if not isinstance(value, (tuple, list)):
        raise PostFieldError(f"info must be a sequence of (key, value) pairs, got {type(value).__name__}; use list(d.items())")
    for pair in value:
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise PostFieldError(f"info pairs must be (key, value) strings, got {pair!r}")


def encode_body(post: Post) -> bytes:
    """Everything after the signature: the bytes the signature covers."""
    check_fields(post)
    t = post.post_type
    parts = [encode_varint(len(post.links)), *post.links, encode_varint(t), encode_varint(post.timestamp)]
    if t == TEXT:
        parts += [_str(post.channel), _str(post.text)]
    elif t == DELETE:
        parts += [encode_varint(len(post.hashes)), *post.hashes]
    elif t == INFO:
        for key, value in post.info:
            parts += [_str(key), _str(value)]
        parts.append(b"\x00")
    elif t == TOPIC:
        parts += [_str(post.channel), _str(post.topic)]
    else:
        parts.append(_str(post.channel))
    return b"".join(parts)


def encode_post(post: Post) -> bytes:
    """Encode a post; the result is validated by decoding it again."""
    if not isinstance(post.public_key, bytes) or not isinstance(post.signature, bytes):
        raise PostFieldError("public key and signature must be bytes")
    if len(post.public_key) != PUBLIC_KEY_SIZE or len(post.signature) != SIGNATURE_SIZE:
        raise LimitError("public key must be 32 bytes and signature 64 bytes")
    if any(len(h) != HASH_SIZE for h in (*post.links, *(post.hashes or ()))):
        raise LimitError("links and hashes must be 32 bytes each")
    buf = post.public_key + post.signature + encode_body(post)
    decode_post(buf)  # the same rules apply to what we write as to what we read
    return buf


def post_hash(buf: bytes) -> bytes:
    """BLAKE2b-256 of the post's bytes: its address in Cable."""
    return hashlib.blake2b(buf, digest_size=HASH_SIZE).digest()
