"""Read-side of :class:`cablestore.Store`: the answers to Cable requests.

Queries that read more than one key read from one LevelDB snapshot, so a
concurrent writer never shows them half of an ingest.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from itertools import islice
from typing import Any

from cablestore.errors import CorruptRecordError, QueryError
from cablestore.keyspace.keys import (
    DELETED,
    LOCAL,
    MONO_SIZE,
    POSTS,
    TS_SIZE,
    HashLike,
    as_hash,
    channel_key,
    mono_timestamp,
    next_prefix,
    unescape,
)
from cablestore.keyspace.records import Tombstone
from cablestore.store.deprecated import renamed_keyword
from cablestore.store.read import spelling
from cablestore.store.read.links import LinkQueries
from cablestore.store.read.ranges import RangeQueries
from cablestore.views import author, chat, state, user
from cablestore.views import channel as channel_view
from cablestore.wire.codec import CHANNEL_TYPES, POST_TYPE_NAMES

U64_MAX = (1 << 64) - 1


def _count(value, what) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise QueryError(f"{what} must be a non-negative integer, got {value!r}")
    return value


def _stop(limit: int) -> int | None:
    """``limit`` as an ``islice`` stop: 0 (all) and counts no store can reach are ``None``."""
    return None if limit == 0 or limit > sys.maxsize else limit


class Queries(LinkQueries, RangeQueries):
    """Hash-level reads of one store: posts by hash, tombstones, channels' time ranges and states, users' posts.

    The store's facade guards every call
    (:func:`cablestore.store.lifecycle.inflight.guard_public_methods`): ``close()``
    waits for it, and plyvel errors leave it as CableErrors.
    """

    # --- posts ------------------------------------------------------------
    def get(self, h: HashLike, default: bytes | None = None) -> bytes | None:
        """The post's bytes (``h``: a hash as bytes or hex), or ``default`` if it is not stored (as plyvel's ``get``)."""
        return self.db.get(POSTS + as_hash(h), default)

    def get_many(self, hashes: Iterable[HashLike]) -> list[bytes | None]:
        """Answer a post request: bytes (or None) for each hash, in order."""
        keys = [as_hash(h) for h in hashes]
        with self.db.snapshot() as snap:
            return [snap.get(POSTS + h) for h in keys]

    def __contains__(self, h: HashLike) -> bool:
        return self.get(h) is not None

    def is_deleted(self, h: HashLike) -> bool:
        """True if a tombstone holds this hash and no post with it is stored.

        A delete that arrived before its target counts, although the target
        will still be accepted if it turns out to belong to someone else than
        the deleter (its author is unknown until it arrives).
        """
        h = as_hash(h)
        with self.db.snapshot() as snap:
            if snap.get(POSTS + h) is not None:
                return False
            return any(t.authorized for t in _tombstones(snap, h))

    def tombstones(self, h: HashLike) -> list[Tombstone]:
        """Every tombstone kept for hash ``h`` (one per post/delete that named it)."""
        return _tombstones(self.db, as_hash(h))

    def tombstones_made_by(self, delete_hash: HashLike, targets: Iterable[HashLike]) -> list[Tombstone]:
        """The tombstones the post/delete ``delete_hash`` left for ``targets`` (hashes as bytes or hex)."""
        by = as_hash(delete_hash)
        with self.db.snapshot() as snap:
            found = [(t, snap.get(DELETED + t + by)) for t in dict.fromkeys(as_hash(x) for x in targets)]
        return [Tombstone.unpack(t, by, v) for t, v in found if v is not None]

    # --- channel time range -------------------------------------------------
    @renamed_keyword("name", "channel")
    def channel_time_range(self, channel: str, start: int = 0, end: int = 0, limit: int = 0) -> list[bytes]:
        """Hashes of post/text and post/delete in ``[start, end)``, newest first.

        ``end=0`` means no upper bound (the spec's "keep the request open"
        case, answered with everything known now); ``limit=0`` means all.
        """
        limit = _count(limit, "limit")
        with self._chat_range(self.db, channel, start, end) as it:
            return [k[-32:] for k in islice(it, _stop(limit))]

    def _chat_range(self, reader: Any, channel: str, start: int = 0, end: int = 0) -> Any:
        """An iterator over a channel's ``!chat`` keys in ``[start, end)``, newest first (close it)."""
        lo, hi = chat_bounds(channel, _count(start, "start"), _count(end, "end"))
        return reader.iterator(start=lo, stop=hi, reverse=True, include_value=False)

    # --- channel state ------------------------------------------------------
    @renamed_keyword("name", "channel")
    def channel_state(self, channel: str, historic: bool = False) -> list[bytes]:
        """Hashes describing a channel (spec 5.4.4): topic, joins/leaves, post/infos.

        Latest topic, latest join/leave of each member, latest post/info of
        each member and ex-member; ``historic=True`` gives every one of them.
        """
        ch = channel_key(channel)
        with self.db.snapshot() as snap, snap.iterator(include_value=False) as it:
            people = self._member_keys(snap, ch)
            if historic:
                out = _all_newest_first(it, state.topic_prefix(ch))
                out += _all_newest_first(it, state.members_prefix(ch))
                for pk in people:
                    out += _all_newest_first(it, user.posts_prefix(pk))
                return out
            out = _latest(it, [state.topic_prefix(ch)])
            # Materialized latest entries: one scan of the members and a point
            # read each, however long the channel's history.
            out += [h for _, h in snap.iterator(prefix=state.latest_members_prefix(ch))]
            for pk in people:
                h = snap.get(user.latest_hash_key(pk))
                if h is not None:
                    out.append(h)
        return out

    @staticmethod
    def _member_keys(snap, ch: bytes, current_only: bool = False) -> list[bytes]:
        prefix = channel_view.members_prefix(ch)
        return [channel_view.member_of_key(k, ch) for k, v in snap.iterator(prefix=prefix) if not current_only or channel_view.is_member(v)]

    @renamed_keyword("name", "channel")
    def members(self, channel: str) -> list[bytes]:
        """Public keys of the channel's current members, ascending."""
        return self._member_keys(self.db, channel_key(channel), current_only=True)

    @renamed_keyword("name", "channel")
    def topic(self, channel: str) -> str:
        """The channel's current topic; "" when none is set (spec 5.4.2)."""
        key = channel_view.topic_key(channel_key(channel))
        value = self.db.get(key)
        return _text(key, value) if value else ""

    def channel_list(self, offset: int = 0, limit: int = 0) -> list[str]:
        """Known channel names, ascending, in their canonical (casefolded) spelling."""
        offset, limit = _count(offset, "offset"), _count(limit, "limit")
        with self.db.snapshot() as snap:
            names = channel_names(snap)
        return names[offset : offset + limit if limit else None]

    def listed_spellings(self, channels: Iterable[str]) -> list[str]:
        """The spelling each of ``channels`` (any spelling) is written and listed under: as its earliest
        post/text or post/topic spells it (:mod:`cablestore.store.read.spelling`); unknown channels as given."""
        if isinstance(channels, (str, bytes)):
            raise QueryError("channels is a list of channel names, not one string")
        return spelling.listed_spellings(self, channels)

    # --- users and authors ----------------------------------------------------
    def name(self, public_key: HashLike) -> str | None:
        """The user's current name (from their latest post/info), or None."""
        key = user.property_key(as_hash(public_key), "name")
        value = self.db.get(key)
        return None if value is None else _text(key, value)

    def user_info(self, public_key: HashLike) -> dict[str, str]:
        """Every property of the user's latest post/info."""
        pk = as_hash(public_key)
        return {user.property_name(k, pk): _text(k, v) for k, v in self.db.iterator(prefix=user.properties_prefix(pk))}

    def author_posts(self, public_key: HashLike, post_type: int | None = None) -> list[bytes]:
        """Hashes of the author's posts (of one type, or all), newest first."""
        if post_type is not None and (type(post_type) is not int or post_type not in POST_TYPE_NAMES):
            raise QueryError(f"post_type must be one of {sorted(POST_TYPE_NAMES)} or None, got {post_type!r}")
        prefix = author.prefix(as_hash(public_key), post_type)
        keys = list(self.db.iterator(prefix=prefix, include_value=False))
        keys.sort(key=lambda k: k[-MONO_SIZE:], reverse=True)
        return [k[-32:] for k in keys]

    def newest_timestamp(self, public_key: HashLike) -> int:
        """The newest claimed timestamp among the author's stored posts (0: none)."""
        pk, newest = as_hash(public_key), 0
        with self.db.snapshot() as snap, snap.iterator(include_value=False) as it:
            for post_type in POST_TYPE_NAMES:
                prefix = author.prefix(pk, post_type)
                # A channel post's key names its channel before its time: the newest of each channel.
                found = _last_per_channel(it, prefix) if post_type in CHANNEL_TYPES else [last_under(it, prefix)]
                newest = max([newest, *(mono_timestamp(key) for key in found if key is not None)])
        return newest

    def local_value(self, key: bytes) -> bytes | None:
        """The value of a ``!local!`` key (this peer's own state: an author's clock, a sync cursor), or None."""
        if not isinstance(key, bytes) or not key.startswith(LOCAL):
            raise QueryError(f"local keys start with {LOCAL!r}, not {bytes(key[:16])!r}")
        return self.db.get(key)


def channel_names(reader: Any) -> list[str]:
    """Every channel with a ``!channel`` entry, ascending (a skip scan over ``reader``: a DB or snapshot)."""
    names = []
    with reader.iterator(prefix=channel_view.PREFIX, include_value=False) as it:
        for key in it:
            name, end = channel_view.channel_of_key(key)
            names.append(name)
            it.seek(next_prefix(key[:end]))
    return names


def _text(key: bytes, value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"view entry {key[:48]!r} is not UTF-8; Store.check(fix=True) sets it aside") from exc


def _tombstones(reader, h: bytes) -> list[Tombstone]:
    prefix = DELETED + h
    return [Tombstone.unpack(h, k[len(prefix) :], v) for k, v in reader.iterator(prefix=prefix)]


# One iterator, re-seeked, answers a whole channel state request: creating an
# iterator per member cost more than the seeks.
def chat_bounds(channel: str, start: int, end: int) -> tuple[bytes, bytes]:
    """The ``(lowest, above highest)`` ``!chat`` keys of a channel's time range ``[start, end)`` (``end = 0``: no bound)."""
    prefix = chat.channel_prefix(channel)
    lo = prefix + min(start, U64_MAX).to_bytes(TS_SIZE, "big")
    hi = next_prefix(prefix) if end == 0 or end > U64_MAX else prefix + end.to_bytes(TS_SIZE, "big")
    return lo, hi


def last_under(it: Any, prefix: bytes) -> Any:
    """What ``it`` (a LevelDB iterator, re-seeked) yields for the greatest key under ``prefix``, or None.

    A key, or a ``(key, value)`` pair, as the iterator was made.
    """
    it.seek(next_prefix(prefix))
    try:
        item = it.prev()
    except StopIteration:
        return None
    return item if (item if isinstance(item, bytes) else item[0]).startswith(prefix) else None


def _last_per_channel(it, prefix: bytes) -> list[bytes]:
    """The greatest key under ``prefix + <ch>`` for each channel ``<ch>`` following ``prefix`` (a skip scan: two seeks a channel)."""
    out = []
    it.seek(prefix)
    while (key := next(it, None)) is not None and key.startswith(prefix):
        try:
            channel = key[: unescape(key, len(prefix))[1]]
        except CorruptRecordError:  # a damaged key (``check`` reports it): itself, then on
            channel = key
        out.append(last_under(it, channel))
        it.seek(next_prefix(channel))
    return out


def _latest(it, prefixes) -> list[bytes]:
    """The hash ending the last key under each prefix (prefixes with none are skipped)."""
    return [key[-32:] for key in (last_under(it, prefix) for prefix in prefixes) if key is not None]


def _all_newest_first(it, prefix: bytes) -> list[bytes]:
    it.seek(prefix)
    keys = []
    for key in it:
        if not key.startswith(prefix):
            break
        keys.append(key)
    keys.sort(key=lambda k: k[-MONO_SIZE:], reverse=True)
    return [k[-32:] for k in keys]
