"""Reading a store as a person would: decoded posts, a channel's messages, totals.

The queries in :mod:`cablestore.store.read.hashes` answer Cable requests with hashes;
this module turns hashes into :class:`StoredPost` objects (type name, author
and the author's current name, timestamp, body fields) and sums a store up
(:class:`StoreStats`).  It is mixed into :class:`cablestore.Store`.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cablestore.compiled import HOT_PATH
from cablestore.errors import CableError, StoreCorruptError
from cablestore.keyspace.keys import DELETED, POSTS, as_hash, canonical_channel, channel_key, escape
from cablestore.store.handle import Component, Handle
from cablestore.store.read.hashes import channel_names
from cablestore.views import actions as actions_view
from cablestore.views import author as author_view
from cablestore.views import channel as channel_view
from cablestore.views import chat as chat_view
from cablestore.views import user as user_view
from cablestore.wire.codec import ACTION_NAMES, DELETE, POST_TYPE_NAMES, ROLE_NAMES, TEXT, Post, decode_post, info_dict, post_hash

__all__ = ["ChannelSummary", "Reading", "StoreStats", "StoredPost"]


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


def _count_keys(reader, prefix: bytes) -> int:
    with reader.iterator(prefix=prefix, include_value=False) as it:
        return sum(1 for _ in it)


def _disk_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:  # LevelDB removed an old table meanwhile
                pass
    return total


class Reading(Component):
    """Decoded reading of one store: posts as :class:`StoredPost`, a channel's messages, channels, statistics.

    ``posts``: the store's hash-level reads (:class:`cablestore.store.read.hashes.Queries`).
    """

    def __init__(self, handle: Handle, posts: Any) -> None:
        super().__init__(handle)
        self._posts = posts

    def post(self, h: bytes | str) -> StoredPost | None:
        """The stored post with hash ``h`` (bytes or hex), decoded, or ``None``."""
        h = as_hash(h)
        with self.db.snapshot() as snap:
            buf = snap.get(POSTS + h)
            if buf is None:
                return None
            post = decode_post(buf)
            name = snap.get(_name_key(post.public_key))
            hider = hidden_by(snap, h, post)
        found = StoredPost.from_bytes(buf, h, _text(name), post)
        return replace(found, hidden_by=hider) if hider is not None else found

    def messages(self, channel: str, start: int = 0, end: int = 0, limit: int = 0, *, include_hidden: bool = False) -> list[StoredPost]:
        """A channel's post/text and post/delete, decoded, newest first.

        The same posts as :meth:`channel_time_range` with the same arguments
        (``end=0``: no upper bound, ``limit=0``: all), each carrying its
        author's current name, except the post/texts hidden for the local
        user (a hidden post, or a hidden user's, in that channel: moderation
        §5.1.3.4-5): left out, or with ``include_hidden=True`` kept and
        marked (``StoredPost.hidden_by``).  ``limit`` counts what is returned.
        A post removed between the range scan and the read is left out.
        """
        moderated = self._any_hidden()
        if not moderated or include_hidden:
            hashes = self._posts.channel_time_range(channel, start, end, limit)
        names: dict[bytes, str | None] = {}
        out = []
        with self.db.snapshot() as snap:
            hidden_users = _hidden_users(snap, channel) if moderated else {}
            if moderated and not include_hidden:  # read the range lazily: hidden posts do not count toward ``limit``
                chat_keys = self._posts._chat_range(snap, channel, start, end)
                hashes = (k[-32:] for k in chat_keys)
            for h in hashes:
                buf = snap.get(POSTS + h, verify_checksums=True)
                if buf is None:
                    continue
                post = _checked_post(self.path, h, buf)
                hider = hidden_by(snap, h, post, hidden_users) if moderated else None
                if hider is not None and not include_hidden:
                    continue
                if post.public_key not in names:
                    names[post.public_key] = _text(snap.get(_name_key(post.public_key)))
                found = StoredPost.from_bytes(buf, h, names[post.public_key], post)
                out.append(replace(found, hidden_by=hider) if hider is not None else found)
                if limit and len(out) == limit:
                    break
            if moderated and not include_hidden:
                chat_keys.close()
        return out

    def _any_hidden(self) -> bool:
        """Whether any post or user is hidden at all (most stores: no, and reading skips the checks)."""
        for prefix in (actions_view.PREFIX + b"h", actions_view.PREFIX + b"u"):
            with self.db.iterator(prefix=prefix, include_value=False) as it:
                if next(it, None) is not None:
                    return True
        return False

    def posts(self, channel: str | None = None) -> Iterator[StoredPost]:
        """Every stored post, decoded, in hash order, from one snapshot.

        With ``channel``: the posts that name that channel (text, topic,
        join, leave) and the post/deletes listed under it.
        """
        wanted = None if channel is None else canonical_channel(channel)
        deletes = set(self._posts.channel_time_range(channel)) if channel is not None else set()
        names: dict[bytes, str | None] = {}
        with self.db.snapshot() as snap, snap.iterator(prefix=POSTS, verify_checksums=True) as it:
            for key, buf in it:
                h = key[len(POSTS) :]
                post = _checked_post(self.path, h, buf)
                if wanted is not None and not ((post.channel is not None and canonical_channel(post.channel) == wanted) or h in deletes):
                    continue
                if post.public_key not in names:
                    names[post.public_key] = _text(snap.get(_name_key(post.public_key)))
                yield StoredPost.from_bytes(buf, h, names[post.public_key], post)

    def __iter__(self) -> Iterator[StoredPost]:
        """Iterate over every stored post (see :meth:`posts`)."""
        return self.posts()

    def __len__(self) -> int:
        """The number of stored posts.  A key scan of the hash store: O(posts), not O(1)."""
        return _count_keys(self.db, POSTS)

    def __bool__(self) -> bool:
        # Without this, ``if store:`` would call __len__ and scan every post.
        return True

    def channels(self) -> list[ChannelSummary]:
        """Every channel with its spelling, topic, member count and message count, ascending by name."""
        out = []
        with self.db.snapshot() as snap:
            for name in channel_names(snap):
                ch = escape(name)  # the name as its keys spell it
                topic = snap.get(channel_view.PREFIX + ch + b"t")
                with snap.iterator(prefix=channel_view.members_prefix(ch)) as it:
                    members = sum(1 for _, v in it if channel_view.is_member(v))
                messages = _count_keys(snap, chat_view.PREFIX + ch)
                out.append(ChannelSummary(name, _text(topic) or "", members, messages))
        spellings = self._posts.listed_spellings([c.name for c in out])
        return [replace(c, spelling=spelled) for c, spelled in zip(out, spellings, strict=True)]

    def channel_post_count(self, channel: str) -> int:
        """How many posts of ``channel`` the store holds: its post/text, post/topic, post/join and post/leave
        (what a ``drop channel`` removes).  Key scans, no post decoded: the channel's members and ex-members
        (every author of a post there), and each one's author rows of the four types in the channel."""
        ch = channel_key(channel)
        members = channel_view.members_prefix(ch)
        with self.db.snapshot() as snap:
            people = [k[len(members) :] for k in snap.iterator(prefix=members, include_value=False)]
            return sum(_count_keys(snap, prefix) for prefix in channel_view.post_prefixes(ch, people))

    def stats(self) -> StoreStats:
        """Count what the store holds (one snapshot; a scan of the keys, no post is decoded)."""
        by_type: Counter[int] = Counter()
        authors = set()
        prefix = author_view.PREFIX
        with self.db.snapshot() as snap:
            posts = _count_keys(snap, POSTS)
            tombstones = _count_keys(snap, DELETED)
            channels = len(channel_names(snap))
            with snap.iterator(prefix=prefix, include_value=False) as it:
                for key in it:
                    authors.add(key[len(prefix) : len(prefix) + 32])
                    by_type[key[len(prefix) + 32]] += 1
        # Types 0-5 always (a chat store's shape); moderation types 6-9 when the store holds some.
        types = {name: by_type.get(t, 0) for t, name in POST_TYPE_NAMES.items() if t < 6 or by_type.get(t)}
        return StoreStats(str(self.path), posts, types, channels, len(authors), tombstones, _disk_bytes(self.path))


def hidden_by(reader: Any, h: bytes, post: Post, users: dict[bytes, bytes] | None = None) -> bytes | None:
    """The action hiding this post/text for the local user: the post hidden, or its author in its channel.

    ``users``: the hidden users of the post's channel, when the caller read them already.
    """
    if post.post_type != TEXT:
        return None
    found = reader.get(actions_view.hidden_post_key(h))
    if found is not None:
        return found
    if users is None:
        users = _hidden_users(reader, post.channel)
    return users.get(post.public_key)


def _hidden_users(reader: Any, channel: str) -> dict[bytes, bytes]:
    """The users hidden in ``channel`` (its own context if it has one, else the cabal's) -> the hiding action."""
    ch = canonical_channel(channel)
    context = ch if reader.get(actions_view.context_key(ch)) is not None else ""
    prefix = actions_view.hidden_users_prefix(context)
    return {k[len(prefix) :]: v for k, v in reader.iterator(prefix=prefix)}


def _name_key(public_key: bytes) -> bytes:
    return user_view.property_key(public_key, "name")


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "replace")


def _checked_post(path: Path, h: bytes, buf: bytes) -> Post:
    """The post stored under ``h``, decoded; one whose bytes are damaged (it does not hash to ``h``,
    or does not decode) raises :class:`StoreCorruptError` instead of being shown as if it were whole.
    (Its block passed LevelDB's checksum, or the damage is older than the block: ``check`` finds it.)"""
    fix = "run `cablestore check STORE --repair` or `cablestore recover STORE`"
    if post_hash(buf) != h:
        raise StoreCorruptError(f"{path}: the post stored under {h.hex()} does not hash to it (damaged); {fix}")
    try:
        return decode_post(buf)
    except CableError as exc:
        raise StoreCorruptError(f"{path}: the post stored under {h.hex()} does not decode ({type(exc).__name__}: {exc}); {fix}") from exc
