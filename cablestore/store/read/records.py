"""What the decoded reads return: :class:`StoredPost` (a post as people read it), :class:`StoreStats`, :class:`ChannelSummary`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cablestore.compiled import HOT_PATH
from cablestore.wire.codec import ACTION_NAMES, DELETE, POST_TYPE_NAMES, ROLE_NAMES, Post, decode_post, info_dict


def _field(name: str, doc: str) -> property:
    """A field of the decoded :class:`Post`, read through ``StoredPost.post``."""

    def read(self: StoredPost) -> Any:
        return getattr(self.post, name)

    read.__doc__ = doc
    return property(read)


@dataclass(frozen=True, slots=True)
class StoredPost:
    """One stored post: its hash, the decoded :class:`cablestore.wire.codec.Post`, and its author's current name.

    The post's fields read through (``post_type``, ``timestamp``, ``links``,
    ``channel``, ``text``, ``topic``, ``info``, and the moderation fields
    ``reason`` … ``undrop``); ``author`` is the post's ``public_key`` and
    ``deleted`` its ``hashes`` (``()`` but for a post/delete).  Fields a
    post's type does not use are ``None``.  ``raw`` holds the post's exact bytes.
    """

    hash: bytes
    post: Post
    raw: bytes
    author_name: str | None = None
    hidden_by: bytes | None = None  # the action hiding this post/text for the local user (moderation.md §5.1.3.4-5)

    author = _field("public_key", "The author's public key.")
    post_type = _field("post_type", "The post type (0-9).")
    timestamp = _field("timestamp", "The claimed timestamp (ms since the epoch).")
    links = _field("links", "The hashes the post links to.")
    channel = _field("channel", "The channel (types 0, 3-5; moderation posts: the context).")
    text = _field("text", "A post/text's text.")
    topic = _field("topic", "A post/topic's topic.")
    info = _field("info", "A post/info's ``(key, value)`` pairs.")
    reason = _field("reason", "A moderation post's reason.")
    privacy = _field("privacy", "A moderation post's privacy flag.")
    recipients = _field("recipients", "A moderation post's recipients.")
    role = _field("role", "A post/role's role.")
    action = _field("action", "A post/moderation's action.")
    drop = _field("drop", "A post/block's drop flag.")
    notify = _field("notify", "A post/block's notify flag.")
    undrop = _field("undrop", "A post/unblock's undrop flag.")

    @property
    def deleted(self) -> tuple[bytes, ...]:
        """The hashes a post/delete deletes (``()`` for any other post)."""
        return self.post.hashes or ()

    @classmethod
    def from_bytes(cls, buf: bytes, h: bytes, author_name: str | None = None, post: Post | None = None) -> StoredPost:
        """Decode ``buf`` (stored under hash ``h``) into a StoredPost."""
        return cls(h, post if post is not None else decode_post(buf), bytes(buf), author_name)

    @property
    def type_name(self) -> str:
        """The spec's name of the post type, e.g. ``"post/text"``."""
        return POST_TYPE_NAMES[self.post_type]

    @property
    def time(self) -> datetime:
        """The claimed timestamp as an aware UTC datetime (milliseconds kept)."""
        return datetime.fromtimestamp(self.timestamp / 1000, tz=UTC)

    @property
    def who(self) -> str:
        """The author's current name, or the first 8 hex digits of their key."""
        return self.author_name if self.author_name is not None else self.author.hex()[:8]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields: bytes as hex, ``info`` as a dict (the last value of a repeated key; ``accept-role`` as 0 or 1)."""
        out: dict[str, Any] = {
            "hash": self.hash.hex(),
            "type": self.type_name,
            "author": self.author.hex(),
            "author_name": self.author_name,
            "timestamp": self.timestamp,
            "time": self.time.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "links": [link.hex() for link in self.links],
        }
        for name in ("channel", "text", "topic"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.info is not None:
            out["info"] = info_dict(self.info)
        if self.post_type == DELETE:
            out["deleted"] = [h.hex() for h in self.deleted]
        if self.recipients is not None:
            out["reason"], out["privacy"] = self.reason, self.privacy
            out["recipients"] = [r.hex() for r in self.recipients]
            if self.role is not None:
                out["role"] = ROLE_NAMES[self.role]
            if self.action is not None:
                out["action"] = ACTION_NAMES[self.action]
            for name in ("drop", "notify", "undrop"):
                if getattr(self, name) is not None:
                    out[name] = getattr(self, name)
        if self.hidden_by is not None:
            out["hidden_by"] = self.hidden_by.hex()
        return out

    def __repr__(self) -> str:
        body = ""
        if self.channel is not None:
            body += f" #{self.channel}"
        for name in ("text", "topic"):
            value = getattr(self, name)
            if value is not None:
                body += f" {name}={_clip(value)!r}"
        if self.info is not None:
            body += f" info={info_dict(self.info)!r}"
        if self.deleted:
            body += f" deleted={len(self.deleted)}"
        if self.role is not None:
            body += f" role={ROLE_NAMES[self.role]}"
        if self.action is not None:
            body += f" action={ACTION_NAMES[self.action]!r}"
        if self.recipients:
            body += f" recipients={len(self.recipients)}"
        return f"<StoredPost {self.type_name} {self.hash.hex()[:12]} by {self.who} at {self.timestamp}{body}>"


def _clip(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


@dataclass(frozen=True, slots=True)
class StoreStats:
    """What a store holds: posts by type, channels, authors, tombstones, bytes on disk.

    ``posts`` counts the hash store; ``by_type`` and ``users`` come from the
    ``!author`` view (so they disagree with ``posts`` only on a store that
    ``cablestore check`` would report).  ``bytes_on_disk`` sums the sizes of
    the store directory's files.
    """

    path: str
    posts: int
    by_type: dict[str, int]
    channels: int
    users: int
    tombstones: int
    bytes_on_disk: int
    hot_path: str = HOT_PATH  # how this process indexes: compiled (Cython) or pure Python (cablestore.compiled)

    def to_dict(self) -> dict[str, Any]:
        """The stats as a JSON-ready dict."""
        return {
            "path": self.path,
            "posts": self.posts,
            "by_type": dict(self.by_type),
            "channels": self.channels,
            "users": self.users,
            "tombstones": self.tombstones,
            "bytes_on_disk": self.bytes_on_disk,
            "hot_path": self.hot_path,
        }


@dataclass(frozen=True, slots=True)
class ChannelSummary:
    """One channel as ``cablestore channels`` lists it.

    ``name`` is the canonical (casefolded) spelling, ``spelling`` the one
    its posts use and authoring writes (``Store.listed_spellings``),
    ``topic`` the current topic (``""``: none), ``members`` the current
    members, ``messages`` the post/text and post/delete its time range holds.
    """

    name: str
    topic: str
    members: int
    messages: int
    spelling: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The summary as a JSON-ready dict."""
        return {"name": self.name, "spelling": self.spelling or self.name, "topic": self.topic, "members": self.members, "messages": self.messages}


__all__ = ["StoredPost", "StoreStats", "ChannelSummary"]
