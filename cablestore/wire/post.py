"""A decoded Cable post (:class:`Post`) and the post types (spec 1.0-draft8 and ``moderation.md``).

The value :mod:`cablestore.wire.codec` decodes bytes into and encodes from,
kept apart from the codec so the type, its fields and its ``repr`` read on
their own; :mod:`cablestore.wire.codec` re-exports every name here.
"""

from __future__ import annotations

from dataclasses import dataclass

from cablestore.wire.fields import ACCEPT_ROLE, ACCEPT_ROLE_VALUES, info_dict
from cablestore.wire.moderation import BLOCK, MODERATION, ROLE, UNBLOCK

TEXT, DELETE, INFO, TOPIC, JOIN, LEAVE = range(6)
POST_TYPE_NAMES = {
    TEXT: "post/text",
    DELETE: "post/delete",
    INFO: "post/info",
    TOPIC: "post/topic",
    JOIN: "post/join",
    LEAVE: "post/leave",
    ROLE: "post/role",
    MODERATION: "post/moderation",
    BLOCK: "post/block",
    UNBLOCK: "post/unblock",
}
CHANNEL_TYPES = frozenset({TEXT, TOPIC, JOIN, LEAVE})



@dataclass(frozen=True, slots=True, repr=False)
class Post:
    """A decoded Cable post.  Body fields not used by its type are ``None``.

    ``info`` is a tuple of ``(key, value)`` string pairs in wire order; an
    ``accept-role`` value, a varint on the wire, is the one character
    ``"\\x00"`` or ``"\\x01"`` (any other is refused), read as 0 or 1 by
    :attr:`accept_role`.
    Moderation posts (types 6-9) carry ``reason`` and ``privacy``, and:
    ``post/role`` ``channel`` (``""``: the whole cabal), ``recipients`` (one
    public key) and ``role``; ``post/moderation`` ``channel``,
    ``recipients`` (public keys or post hashes; none for channel actions)
    and ``action``; ``post/block`` ``recipients``, ``drop`` and ``notify``;
    ``post/unblock`` ``recipients`` and ``undrop``.
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
    reason: str | None = None
    privacy: int | None = None
    recipients: tuple[bytes, ...] | None = None
    role: int | None = None
    action: int | None = None
    drop: int | None = None
    notify: int | None = None
    undrop: int | None = None

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
            fields.append(f"info={info_dict(self.info)!r}")
        if self.hashes is not None:
            fields.append(f"deletes=[{', '.join(h.hex()[:12] for h in self.hashes)}]")
        if self.recipients is not None:
            fields.append(f"recipients=[{', '.join(h.hex()[:12] for h in self.recipients)}]")
        for name in ("role", "action", "drop", "notify", "undrop", "privacy"):
            value = getattr(self, name)
            if value:
                fields.append(f"{name}={value}")
        if self.reason:
            fields.append(f"reason={self.reason!r}")
        if self.links:
            fields.append(f"links={len(self.links)}")
        return f"Post({', '.join(fields)})"

    def info_value(self, key: str) -> str | None:
        """The value of ``key`` in a post/info (the last one if repeated), as it is held (``accept-role``: ``"\\x00"`` or ``"\\x01"``)."""
        found = None
        for k, v in self.info or ():
            if k == key:
                found = v
        return found

    @property
    def accept_role(self) -> int | None:
        """A post/info's ``accept-role`` (wire.md §6.2.4): 0 (declines roles), 1, or None when it does not set it."""
        value = self.info_value(ACCEPT_ROLE)
        return None if value is None else ACCEPT_ROLE_VALUES.get(value)


def slot_setters(cls) -> tuple:
    """The slot setters of a frozen slotted dataclass, in field order, for hot-path constructors.

    A frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__``; calling the slots' own setters is about twice as
    fast.  A constructor using them must set every field exactly once.
    """
    return tuple(cls.__dict__[name].__set__ for name in cls.__dataclass_fields__)
