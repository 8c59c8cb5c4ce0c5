"""Encode and decode Cable posts (spec 1.0-draft8, wire-compatible with cable.js 0.2.1).

A post is a header (public key, signature, links, post type, timestamp)
followed by a body that depends on the post type.  Decoding is strict: the
result re-encodes to exactly the input bytes, so a post's hash and signature
stay meaningful after a round trip.  That is why non-minimal varints are
refused even though LEB128 readers usually accept them.

Post types 6-9 are the moderation posts of ``moderation.md`` (1.0-draft8):
``post/role``, ``post/moderation``, ``post/block`` and ``post/unblock``, each
a moderation header (``reason``, ``privacy``) and a body.  They are decoded
as strictly as the others; cable.js 0.2.1 is laxer (it accepts unknown
``action`` values, trailing bytes, any flag value, and limits ``reason`` in
bytes rather than codepoints): such posts are refused here.

``post/info`` uses the deployed form (cable.js 0.2.1 and the Rust crate):
key/value pairs terminated by a zero key length.  Spec draft8 instead prefixes
a ``num_keypairs`` count; such a post does not parse as the deployed form
(the count is read as a key length and the rest no longer lines up), so it is
refused with a :class:`DecodeError` and never written.
"""

from __future__ import annotations

import hashlib

from cablestore.compiled import native as _native
from cablestore.errors import (
    CableError,
    LimitError,
    PostFieldError,
    TrailingBytesError,
    TruncatedError,
    UnknownPostTypeError,
)
from cablestore.wire.fields import (  # noqa: F401 - re-exported: the codec's public names
    ACCEPT_ROLE,
    ACCEPT_ROLE_VALUES,
    CHANNEL_CODEPOINTS,
    HASH_SIZE,
    HEADER_FIXED,
    INFO_KEY_CODEPOINTS,
    MAX_INFO_VALUE_BYTES,
    MAX_TEXT_BYTES,
    MAX_TOPIC_CODEPOINTS,
    NAME_CODEPOINTS,
    PUBLIC_KEY_SIZE,
    SIGNATURE_SIZE,
    U64_MAX,
    check_accept_role,
    check_codepoints,
    encode_str,
    encode_varint,
    info_dict,
    read_hashes,
    read_str,
    read_varint,
)
from cablestore.wire.moderation import (  # noqa: F401 - re-exported
    ACTION_NAMES,
    ADMIN,
    BLOCK,
    DROP_CHANNEL,
    DROP_POST,
    HIDE_POST,
    HIDE_USER,
    MOD,
    MODERATION,
    MODERATION_TYPES,
    ROLE,
    ROLE_NAMES,
    UNBLOCK,
    UNDROP_CHANNEL,
    UNDROP_POST,
    UNHIDE_POST,
    UNHIDE_USER,
    USER,
    encode_moderation,
    read_moderation,
)
from cablestore.wire.post import (  # noqa: F401 - re-exported: the codec's public names
    CHANNEL_TYPES,
    DELETE,
    INFO,
    JOIN,
    LEAVE,
    POST_TYPE_NAMES,
    TEXT,
    TOPIC,
    Post,
    slot_setters,
)

# --- decoding ------------------------------------------------------------


def _read_channel(buf: bytes, pos: int) -> tuple[str, int]:
    channel, _, pos = read_str(buf, pos, "channel")
    if not CHANNEL_CODEPOINTS[0] <= len(channel) <= CHANNEL_CODEPOINTS[1]:
        check_codepoints(channel, CHANNEL_CODEPOINTS, "channel name")  # raises
    return channel, pos


def _read_info(buf: bytes, pos: int) -> tuple[tuple[tuple[str, str], ...], int]:
    pairs = []
    while True:
        key, key_len, pos = read_str(buf, pos, "info key")
        if key_len == 0:
            return tuple(pairs), pos
        check_codepoints(key, INFO_KEY_CODEPOINTS, "info key")
        value, value_len, pos = read_str(buf, pos, "info value")
        if value_len > MAX_INFO_VALUE_BYTES:
            raise LimitError(f"info value is {value_len} bytes, limit {MAX_INFO_VALUE_BYTES}")
        if key == "name":
            check_codepoints(value, NAME_CODEPOINTS, "user name")
        elif key == ACCEPT_ROLE:
            check_accept_role(value)
        pairs.append((key, value))


def decode_post(buf: bytes) -> Post:
    """Decode and validate one post.  Raises only :class:`CableError` subclasses."""
    return _decode(buf)


def decode_post_py(buf: bytes) -> Post:
    """:func:`decode_post` in pure Python (the compiled twin hands it every post it does not decode itself)."""
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
        links, pos = read_hashes(buf, HEADER_FIXED, "links")
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
        text, text_len, pos = read_str(buf, pos, "text")
        if text_len > MAX_TEXT_BYTES:
            raise LimitError(f"text is {text_len} bytes, limit {MAX_TEXT_BYTES}")
    elif post_type == DELETE:
        hashes, pos = read_hashes(buf, pos, "deletions")
        if not hashes:
            raise LimitError("post/delete must name at least one hash")
    elif post_type == INFO:
        info, pos = _read_info(buf, pos)
    elif post_type == TOPIC:
        channel, pos = _read_channel(buf, pos)
        topic, _, pos = read_str(buf, pos, "topic")
        if len(topic) > MAX_TOPIC_CODEPOINTS:
            raise LimitError(f"topic exceeds {MAX_TOPIC_CODEPOINTS} codepoints")
    elif post_type <= LEAVE:  # JOIN, LEAVE
        channel, pos = _read_channel(buf, pos)
    else:
        fields, pos = read_moderation(buf, pos, post_type)
        if pos != n:
            raise TrailingBytesError(f"{n - pos} trailing bytes after the post")
        return Post(buf[:PUBLIC_KEY_SIZE], buf[PUBLIC_KEY_SIZE:HEADER_FIXED], links, post_type, timestamp, **fields)
    if pos != n:
        raise TrailingBytesError(f"{n - pos} trailing bytes after the post")
    return _new_post(buf[:PUBLIC_KEY_SIZE], buf[PUBLIC_KEY_SIZE:HEADER_FIXED], links, post_type, timestamp, channel, text, hashes, info, topic)


_POST_SETTERS = slot_setters(Post)
assert len(_POST_SETTERS) == 18


def _new_post(public_key, signature, links, post_type, timestamp, channel, text, hashes, info, topic) -> Post:
    """``Post(...)`` of types 0-5, without the frozen ``__init__``'s cost (decoding is hot)."""
    post = object.__new__(Post)
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9 = _POST_SETTERS[:10]
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
    for setter in _MODERATION_SETTERS:
        setter(post, None)
    return post


_MODERATION_SETTERS = _POST_SETTERS[10:]


# --- encoding ------------------------------------------------------------


_BODY_FIELDS = {
    TEXT: ("channel", "text"),
    DELETE: ("hashes",),
    INFO: ("info",),
    TOPIC: ("channel", "topic"),
    JOIN: ("channel",),
    LEAVE: ("channel",),
    ROLE: ("reason", "privacy", "channel", "recipients", "role"),
    MODERATION: ("reason", "privacy", "channel", "recipients", "action"),
    BLOCK: ("reason", "privacy", "recipients", "drop", "notify"),
    UNBLOCK: ("reason", "privacy", "recipients", "undrop"),
}
BODY_FIELD_NAMES = ("channel", "text", "hashes", "info", "topic", "reason", "privacy", "recipients", "role", "action", "drop", "notify", "undrop")
_INT_FIELDS = frozenset({"privacy", "role", "action", "drop", "notify", "undrop"})


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
        if name in ("hashes", "recipients"):
            _check_hash_list(value, name)
        elif name in _INT_FIELDS:
            if not _is_u64(value):
                raise PostFieldError(f"{name} must be an integer, got {value!r}")
        elif name == "info":
            _check_info(value)
        elif not isinstance(value, str):
            raise PostFieldError(f"{name} must be a string, got {type(value).__name__}")
    unused = [n for n in BODY_FIELD_NAMES if n not in _BODY_FIELDS[t] and getattr(post, n) is not None]
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
        parts += [encode_str(post.channel), encode_str(post.text)]
    elif t == DELETE:
        parts += [encode_varint(len(post.hashes)), *post.hashes]
    elif t == INFO:
        for key, value in post.info:
            parts += [encode_str(key), encode_str(value)]
        parts.append(b"\x00")
    elif t == TOPIC:
        parts += [encode_str(post.channel), encode_str(post.topic)]
    elif t <= LEAVE:
        parts.append(encode_str(post.channel))
    else:
        parts += encode_moderation(post)
    return b"".join(parts)


def encode_post(post: Post) -> bytes:
    """Encode a post; the result is validated by decoding it again."""
    if not isinstance(post.public_key, bytes) or not isinstance(post.signature, bytes):
        raise PostFieldError("public key and signature must be bytes")
    if len(post.public_key) != PUBLIC_KEY_SIZE or len(post.signature) != SIGNATURE_SIZE:
        raise LimitError("public key must be 32 bytes and signature 64 bytes")
    if any(len(h) != HASH_SIZE for h in (*post.links, *(post.hashes or ()), *(post.recipients or ()))):
        raise LimitError("links and hashes must be 32 bytes each")
    buf = post.public_key + post.signature + encode_body(post)
    decode_post(buf)  # the same rules apply to what we write as to what we read
    return buf


def post_type_of(buf: bytes) -> int | None:
    """The post type read from a post's header without decoding the rest (None: not even a header)."""
    try:
        links, pos = read_varint(buf, HEADER_FIXED)
        return read_varint(buf, pos + links * HASH_SIZE)[0]
    except CableError:
        return None


def post_hash(buf: bytes) -> bytes:
    """BLAKE2b-256 of the post's bytes: its address in Cable."""
    return hashlib.blake2b(buf, digest_size=HASH_SIZE).digest()


# The compiled decoder when the extension is there (cablestore.compiled); the same posts, the same errors.
_decode = decode_post_py
if _native is not None:
    _native.bind_codec(Post, decode_post_py)
    _decode = _native.decode_post
