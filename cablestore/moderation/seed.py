"""The moderation seed (moderation.md §4.7): users to regard as admins or mods by default when joining a cabal.

On the wire and on disk a seed is ``<varint role><32-byte ed25519 public key>``
pairs, at most 16, in no particular order; roles are numbered as in §5.1.2
(0 admin, 1 mod, 2 normal user; the example in §4.7.3 numbers them otherwise
and writes the role as one hex digit: cablestore follows §5.1.2, as cable.js
does for post/role).  A seed gives its users a *default* role: it creates no
post/role, an admin's role for a seeded user decides it instead, and a
seeded user's roles and actions count whenever they were authored (their
authority is their seeded role, not their role at that moment).  Clearing a
seed returns its users to normal users; what they did that was applied
stays applied (:attr:`Seed.kept`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cablestore.errors import ArgumentError
from cablestore.wire.fields import encode_varint, read_varint
from cablestore.wire.moderation import ROLE_NAMES

MAX_USERS = 16  # §4.7.2: "no more than 16 public key assignments"


@dataclass(frozen=True)
class Seed:
    """A seed in effect (``roles``: user -> role) and the posts of seeded users kept applied after a seed was cleared."""

    roles: dict = field(default_factory=dict)
    kept: frozenset = frozenset()


def parse_seed(data: bytes) -> dict[bytes, int]:
    """``{public key: role}`` of a seed's bytes; a malformed seed raises :class:`ArgumentError`."""
    if not isinstance(data, (bytes, bytearray)):
        raise ArgumentError("a moderation seed is bytes")
    data, pos, out = bytes(data), 0, {}
    while pos < len(data):
        try:
            role, pos = read_varint(data, pos)
        except Exception as exc:  # noqa: BLE001 - the codec's own DecodeError
            raise ArgumentError(f"moderation seed: bad role varint at byte {pos}") from exc
        if role not in ROLE_NAMES:
            raise ArgumentError(f"moderation seed: role {role} is not 0 (admin), 1 (mod) or 2 (user)")
        key = data[pos : pos + 32]
        if len(key) != 32:
            raise ArgumentError("moderation seed: a role must be followed by a 32-byte public key")
        if key in out:
            raise ArgumentError(f"moderation seed: {key.hex()} is assigned twice")
        out[key] = role
        pos += 32
        if len(out) > MAX_USERS:
            raise ArgumentError(f"moderation seed: more than {MAX_USERS} users")
    if not out:
        raise ArgumentError("moderation seed: empty")
    return out


def format_seed(roles: dict[bytes, int]) -> bytes:
    """The bytes of a seed (pairs in key order, so one seed has one spelling)."""
    return b"".join(encode_varint(role) + key for key, role in sorted(roles.items()))


__all__ = ["Seed", "parse_seed", "format_seed", "MAX_USERS"]
