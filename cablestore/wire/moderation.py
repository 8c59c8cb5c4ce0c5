"""The moderation posts of ``moderation.md`` (1.0-draft8, §5.1): the header every
type 6-9 post adds (``reason``, ``privacy``) and the bodies of ``post/role``,
``post/moderation``, ``post/block`` and ``post/unblock``.

Decoding is as strict as for the other post types.  cable.js 0.2.1 is laxer:
it accepts unknown ``action`` values, trailing bytes and any flag value, and
limits ``reason`` in bytes rather than codepoints; such posts are refused here.
"""

from __future__ import annotations

from typing import Any

from cablestore.errors import LimitError, TruncatedError
from cablestore.wire.fields import (
    CHANNEL_CODEPOINTS,
    HASH_SIZE,
    check_codepoints,
    encode_str,
    encode_varint,
    read_hashes,
    read_str,
    read_varint,
)

ROLE, MODERATION, BLOCK, UNBLOCK = range(6, 10)
MODERATION_TYPES = frozenset({ROLE, MODERATION, BLOCK, UNBLOCK})
MAX_REASON_CODEPOINTS = 128
RECIPIENTS = (1, 16)  # recipient_count of user and post actions, blocks and unblocks

# post/role's role (moderation.md §5.1.2; the examples in §4.2.3 and §4.7.3 say otherwise, cable.js follows §5.1.2)
ADMIN, MOD, USER = 0, 1, 2
ROLE_NAMES = {ADMIN: "admin", MOD: "mod", USER: "user"}
# post/moderation's action (§5.1.3): even values act, the odd value after each undoes it
HIDE_USER, UNHIDE_USER, HIDE_POST, UNHIDE_POST, DROP_POST, UNDROP_POST, DROP_CHANNEL, UNDROP_CHANNEL = range(8)
ACTION_NAMES = {
    HIDE_USER: "hide user",
    UNHIDE_USER: "unhide user",
    HIDE_POST: "hide post",
    UNHIDE_POST: "unhide post",
    DROP_POST: "drop post",
    UNDROP_POST: "undrop post",
    DROP_CHANNEL: "drop channel",
    UNDROP_CHANNEL: "undrop channel",
}


def _read_flag(buf: bytes, pos: int, what: str) -> tuple[int, int]:
    value, pos = read_varint(buf, pos)
    if value not in (0, 1):
        raise LimitError(f"{what} must be 0 or 1, got {value}")
    return value, pos


def read_recipients(buf: bytes, pos: int, bounds: tuple[int, int], what: str) -> tuple[tuple[bytes, ...], int]:
    """A recipient count within ``bounds`` and that many 32-byte keys or hashes."""
    recipients, pos = read_hashes(buf, pos, what)
    lo, hi = bounds
    if not lo <= len(recipients) <= hi:
        raise LimitError(f"{what}: {len(recipients)} recipients, must be {lo}-{hi}")
    return recipients, pos


def read_moderation(buf: bytes, pos: int, post_type: int) -> tuple[dict, int]:
    """The moderation header and body of a post of type 6-9 (moderation.md §5.1)."""
    reason, _, pos = read_str(buf, pos, "reason")
    if len(reason) > MAX_REASON_CODEPOINTS:
        raise LimitError(f"reason exceeds {MAX_REASON_CODEPOINTS} codepoints")
    privacy, pos = _read_flag(buf, pos, "privacy")
    out = {"reason": reason, "privacy": privacy}
    if post_type == ROLE:
        channel, pos = read_context(buf, pos)
        if pos + HASH_SIZE > len(buf):
            raise TruncatedError("post/role: recipient runs past the end of the buffer")
        out.update(channel=channel, recipients=(buf[pos : pos + HASH_SIZE],))
        role, pos = read_varint(buf, pos + HASH_SIZE)
        if role not in ROLE_NAMES:
            raise LimitError(f"role must be 0 (admin), 1 (mod) or 2 (user), got {role}")
        out["role"] = role
    elif post_type == MODERATION:
        channel, pos = read_context(buf, pos)
        recipients, pos = read_hashes(buf, pos, "recipients")
        action, pos = read_varint(buf, pos)
        if action not in ACTION_NAMES:
            raise LimitError(f"action must be 0-7, got {action}")
        if action in (DROP_CHANNEL, UNDROP_CHANNEL):
            if recipients:
                raise LimitError(f"{ACTION_NAMES[action]} names no recipients, got {len(recipients)}")
            if not channel:
                raise LimitError(f"{ACTION_NAMES[action]} must name a channel")
        elif not RECIPIENTS[0] <= len(recipients) <= RECIPIENTS[1]:
            raise LimitError(f"{ACTION_NAMES[action]}: {len(recipients)} recipients, must be 1-16")
        out.update(channel=channel, recipients=recipients, action=action)
    elif post_type == BLOCK:
        recipients, pos = read_recipients(buf, pos, RECIPIENTS, "post/block recipients")
        drop, pos = _read_flag(buf, pos, "drop")
        notify, pos = _read_flag(buf, pos, "notify")
        out.update(recipients=recipients, drop=drop, notify=notify)
    else:  # UNBLOCK
        recipients, pos = read_recipients(buf, pos, RECIPIENTS, "post/unblock recipients")
        undrop, pos = _read_flag(buf, pos, "undrop")
        out.update(recipients=recipients, undrop=undrop)
    return out, pos


def read_context(buf: bytes, pos: int) -> tuple[str, int]:
    """A channel context: a channel name, or ``""`` for the whole cabal (moderation.md §4.1)."""
    channel, n, pos = read_str(buf, pos, "channel")
    if n and len(channel) > CHANNEL_CODEPOINTS[1]:
        check_codepoints(channel, CHANNEL_CODEPOINTS, "channel name")  # raises
    return channel, pos


def encode_moderation(post: Any) -> list[bytes]:
    """The moderation header and body of ``post`` (type 6-9), as byte strings to join."""
    t = post.post_type
    parts = [encode_str(post.reason), encode_varint(post.privacy)]
    if t == ROLE:
        if len(post.recipients) != 1:
            raise LimitError(f"post/role has exactly one recipient, got {len(post.recipients)}")
        parts += [encode_str(post.channel), post.recipients[0], encode_varint(post.role)]
    elif t == MODERATION:
        parts += [encode_str(post.channel), encode_varint(len(post.recipients)), *post.recipients, encode_varint(post.action)]
    elif t == BLOCK:
        parts += [encode_varint(len(post.recipients)), *post.recipients, encode_varint(post.drop), encode_varint(post.notify)]
    else:
        parts += [encode_varint(len(post.recipients)), *post.recipients, encode_varint(post.undrop)]
    return parts
