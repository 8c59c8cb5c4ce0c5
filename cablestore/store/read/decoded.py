"""Reading a store as a person would: decoded posts, a channel's messages, totals.

The queries in :mod:`cablestore.store.read.hashes` answer Cable requests with hashes;
this module turns hashes into :class:`StoredPost` objects (type name, author
and the author's current name, timestamp, body fields) and sums a store up
(:class:`StoreStats`); the records it returns live in
:mod:`cablestore.store.read.records`.  A component of :class:`cablestore.Store`.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from cablestore.errors import CableError, StoreCorruptError
from cablestore.keyspace.keys import DELETED, POSTS, as_hash, canonical_channel, channel_key, escape
from cablestore.store.handle import Component, Handle
from cablestore.store.read.hashes import channel_names
from cablestore.store.read.records import ChannelSummary, StoredPost, StoreStats
from cablestore.views import actions as actions_view
from cablestore.views import author as author_view
from cablestore.views import channel as channel_view
from cablestore.views import chat as chat_view
from cablestore.views import user as user_view
from cablestore.wire.codec import POST_TYPE_NAMES, TEXT, Post, decode_post, post_hash

__all__ = ["ChannelSummary", "Reading", "StoreStats", "StoredPost"]


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
        for prefix in (actions_view.HIDDEN_POSTS, actions_view.HIDDEN_USERS):
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
                topic = snap.get(channel_view.topic_key(ch))
                with snap.iterator(prefix=channel_view.members_prefix(ch)) as it:
                    members = sum(1 for _, v in it if channel_view.is_member(v))
                messages = _count_keys(snap, chat_view.escaped_prefix(ch))
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
            people = [channel_view.member_of_key(k, ch) for k in snap.iterator(prefix=members, include_value=False)]
            return sum(_count_keys(snap, prefix) for prefix in channel_view.post_prefixes(ch, people))

    def stats(self) -> StoreStats:
        """Count what the store holds (one snapshot; a scan of the keys, no post is decoded)."""
        by_type: Counter[int] = Counter()
        authors = set()
        with self.db.snapshot() as snap:
            posts = _count_keys(snap, POSTS)
            tombstones = _count_keys(snap, DELETED)
            channels = len(channel_names(snap))
            with snap.iterator(prefix=author_view.PREFIX, include_value=False) as it:
                for key in it:
                    authors.add(author_view.author_of_key(key))
                    by_type[author_view.type_of_key(key)] += 1
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
