"""Full-text search of a store: :meth:`Searching.search`, mixed into :class:`cablestore.Store`.

The index is the ``search`` view (``views/search.py``), kept by a store
with search enabled (``!meta!search``: :meth:`Searching.enable_search`).
A query (:func:`cablestore.search.parse`) is a conjunction of disjunctions
of lookups, walked by :mod:`cablestore.store.search_index.postings` (a leapfrog over
each term's postings, newest first).  Each candidate they agree on is read and confirmed by :meth:`Query.match` (phrases,
exclusions), then the filters apply: channel, authors, time, moderation.

Work per call is bounded: at most :data:`MAX_EXAMINED` candidates read and
:data:`cablestore.store.search_index.postings.MAX_SEEKS` iterator seeks.  A call that reaches either bound returns
what it found with a :attr:`SearchPage.next` cursor where it stopped, so a
caller pages on; ``next`` is None only when nothing is left.

What never matches: a deleted or dropped post, or one a block removed, is
gone from the store with its index rows (the removal's own WriteBatch); a
blocked user's posts a block did not remove (``drop = 0``) are left out
here; hidden posts (a hidden post, or a hidden user's, as
:meth:`cablestore.Store.messages` hides them) only with ``include_hidden``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice
from typing import Any

from cablestore.errors import QueryError, SearchNotEnabledError
from cablestore.keyspace.keys import POSTS, SEARCH, SEARCH_KEY, HashLike, as_hash, canonical_channel, escape
from cablestore.search import Query, normalize, parse
from cablestore.store.handle import Component, Handle
from cablestore.store.read.decoded import StoredPost, _checked_post, _hidden_users, _name_key, _text, hidden_by
from cablestore.store.search_index import postings
from cablestore.store.write.writer import Writer
from cablestore.views import actions as actions_view
from cablestore.views import blocks as blocks_view
from cablestore.views import search as search_view
from cablestore.wire.codec import Post  # noqa: F401  (the fields SearchHit inherits name it: the API reference resolves them here)

__all__ = ["MAX_EXAMINED", "SearchHit", "SearchPage", "Searching"]

MAX_EXAMINED = 500
"""Candidates (posts indexed under every conjunct) one call reads and confirms at most.

Confirming one (read, decode, :meth:`Query.match`) costs 20 to 200 µs,
most of it ``match``: a phrase of two common words that seldom stand
together (``"but in"``) examines this many and returns a cursor, in tens
of milliseconds, instead of reading on."""
MAX_LIMIT = 1000
"""The most hits one page holds."""
_BUILD_BATCH = 100_000  # search entries per WriteBatch when the index is built or removed


@dataclass(frozen=True, slots=True, repr=False)
class SearchHit(StoredPost):
    """A :class:`StoredPost` a search found, with ``spans``: the ``(start, end)`` character ranges of
    its text (a post/text) or topic (a post/topic) that matched, to highlight."""

    spans: tuple[tuple[int, int], ...] = ()

    @property
    def searched(self) -> str:
        """The text the spans index into: the post's text, or its topic."""
        return search_view.searched_text(self.post) or ""

    def to_dict(self) -> dict[str, Any]:
        """:meth:`StoredPost.to_dict` with ``spans`` (lists of two indices into the text or topic)."""
        out = StoredPost.to_dict(self)
        out["spans"] = [list(s) for s in self.spans]
        return out


class SearchPage(list):
    """The hits of one :meth:`Searching.search` call (a list), newest first.

    ``next``: an opaque cursor to pass as ``cursor=`` for the hits after
    these (None: there are none).  ``examined``: candidates read.
    """

    def __init__(self, hits: Iterable[SearchHit] = (), next: str | None = None, examined: int = 0) -> None:
        super().__init__(hits)
        self.next = next
        self.examined = examined


class _Authors:
    """Whom ``from:`` and ``author=`` name: public keys by name (casefolded) or by hex prefix."""

    def __init__(self, snap, wanted: list) -> None:
        self.groups = []  # each a (keys, hex prefixes) pair; a post must be in every group
        names = None
        for spec in wanted:
            if isinstance(spec, (bytes, bytearray)):
                self.groups.append(({as_hash(spec)}, ()))
                continue
            if isinstance(spec, tuple):  # the from: words, any of which
                words = spec
            else:
                words = (spec,)
            keys, prefixes = set(), []
            for w in words:
                if not isinstance(w, str) or not w:
                    raise QueryError(f"an author is a public key, a name or a key's hex prefix, not {w!r}")
                low = w.lower()
                if all(c in "0123456789abcdef" for c in low):
                    prefixes.append(low)
                if names is None:
                    names = _names_by_fold(snap)
                keys |= names.get(normalize(w), set())
            self.groups.append((keys, tuple(prefixes)))

    def __bool__(self) -> bool:
        return bool(self.groups)

    def admit(self, public_key: bytes) -> bool:
        hexed = None
        for keys, prefixes in self.groups:
            if public_key in keys:
                continue
            if prefixes:
                hexed = hexed or public_key.hex()
                if any(hexed.startswith(p) for p in prefixes):
                    continue
            return False
        return True


def _names_by_fold(snap) -> dict[str, set[bytes]]:
    """Normalized current name -> the users with that name."""
    from cablestore.store.read.users import _names

    out: dict[str, set[bytes]] = {}
    for pk, name in _names(snap).items():
        if name is not None:
            out.setdefault(normalize(name), set()).add(pk)
    return out


def _any(snap, prefix: bytes) -> bool:
    with snap.iterator(prefix=prefix, include_value=False) as it:
        return next(it, None) is not None


def _moderation(snap) -> tuple[bool, set, bool, set]:
    """``(anything hidden, blocked users, any post dropped, dropped channels)`` as the store holds them now.

    Dropped posts and channels are gone from the store (the drop removed
    them in its WriteBatch); they are checked again here only as a guard.
    """
    hidden = _any(snap, actions_view.HIDDEN_POSTS) or _any(snap, actions_view.HIDDEN_USERS)
    blocked = {blocks_view.blocked_user(k) for k in snap.iterator(prefix=blocks_view.BLOCKED, include_value=False)}
    channels = {actions_view.channel_of_dropped_key(k) for k in snap.iterator(prefix=actions_view.DROPPED_CHANNELS, include_value=False)}
    return hidden, blocked, _any(snap, actions_view.DROPPED_POSTS), channels


class Searching(Component):
    """The full-text index of one store: keeping it (through ``writer``, whose batches then index every post) and searching it."""

    def __init__(self, handle: Handle, writer: Writer) -> None:
        super().__init__(handle)
        self._writer = writer

    def enable_search(self) -> int:
        """Keep the full-text index from now on, and build it for the posts held; returns the entries written.

        Every later ingest and removal keeps it in the same WriteBatch;
        ``check`` verifies it, ``reindex`` rebuilds it.  Already kept: 0.
        """
        with self._writer.lease() as lease:
            if lease.db.get(SEARCH_KEY) is not None:
                self._writer.search = True
                return 0
            written = 0
            with lease.db.snapshot() as snap:
                entries = postings.index_entries(snap)
                while chunk := list(islice(entries, _BUILD_BATCH)):
                    written += lease.write(chunk)
            lease.put(SEARCH_KEY, b"1", sync=True)  # after the rows: an interrupted build leaves no flag (check reports the rows)
            self._writer.search = True
        return written

    def disable_search(self) -> int:
        """Stop keeping the full-text index and remove it; returns the entries removed."""
        with self._writer.lease() as lease:
            lease.delete(SEARCH_KEY, sync=True)  # first: an interrupted removal leaves rows check reports, never a flag without rows
            self._writer.search = False
            removed = 0
            while True:
                with lease.db.iterator(prefix=SEARCH, include_value=False) as it:
                    keys = list(islice(it, _BUILD_BATCH))
                if not keys:
                    return removed
                removed += lease.write([(k, None) for k in keys])

    @property
    def search_enabled(self) -> bool:
        """Whether the store keeps the full-text index (:meth:`search` needs it)."""
        return self.db.get(SEARCH_KEY) is not None

    def search(
        self,
        query: str | Query,
        *,
        channel: str | None = None,
        author: HashLike | None = None,
        start: int = 0,
        end: int = 0,
        limit: int = 50,
        include_hidden: bool = False,
        cursor: str | None = None,
    ) -> SearchPage:
        """The post/texts and post/topics matching ``query``, newest first, as :class:`SearchHit` s in a :class:`SearchPage`.

        ``query``: the query language (``cablestore.search.query.SYNTAX``;
        a bad query raises :class:`cablestore.errors.QueryError`).
        ``channel``, ``author`` (a public key, or a name or a key's hex
        prefix as ``from:`` takes), ``start``/``end`` (``[start, end)`` in
        ms, ``end = 0``: no bound) narrow it, with the query's own ``in:``,
        ``from:``, ``after:``, ``before:``.  ``limit`` (1 to 1000) hits at
        most; ``cursor``: a previous page's ``next``, for the hits after it.
        Hidden posts are left out unless ``include_hidden`` (then they carry
        ``hidden_by``).  Names are not searched: ``from:`` finds a user by name.
        A store without the index raises :class:`cablestore.errors.SearchNotEnabledError`.
        """
        q = query if isinstance(query, Query) else parse(query) if isinstance(query, str) else None
        if q is None:
            raise QueryError(f"a search query is a str, not {type(query).__name__}")
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
            raise QueryError(f"limit is an int from 1 to {MAX_LIMIT}, not {limit!r}")
        first, last = postings.time_bounds(q, start, end)
        first = max(first, postings.cursor_start(cursor))
        if channel is not None and not isinstance(channel, str):
            raise QueryError(f"a channel name is a str, not {type(channel).__name__}")
        channels = {canonical_channel(c) for c in (channel, q.channel) if c is not None}
        with self.db.snapshot() as snap:
            if snap.get(SEARCH_KEY) is None:
                raise SearchNotEnabledError(
                    f"{self.path} keeps no search index (open it with Store(path, search=True), or call Store.enable_search())"
                )
            wanted_authors = ([q.authors] if q.authors else []) + ([author] if author is not None else [])
            authors = _Authors(snap, wanted_authors)
            moderated, blocked, dropped, dropped_channels = _moderation(snap)
            return self._run(snap, q, first, last, limit, include_hidden, channels, authors, (moderated, blocked, dropped, dropped_channels))

    def _run(self, snap, q: Query, first: bytes, last: bytes | None, limit: int, include_hidden: bool, channels: set, authors: _Authors, moderation) -> SearchPage:
        moderated, blocked, dropped, dropped_channels = moderation
        budget = [postings.MAX_SEEKS]
        conjuncts, opened = postings.conjuncts(snap, q, budget)
        hits = SearchPage()
        names: dict[bytes, str | None] = {}
        hidden_users: dict[str, dict] = {}
        try:
            for x, stop in postings.walk(snap, conjuncts, first, budget):
                if x is None:  # out of seeks: go on from ``stop`` (unless it is past the time range)
                    hits.next = postings.CURSOR + stop.hex() if last is None or stop <= last else None
                    break
                if last is not None and x > last:
                    break
                if hits.examined == MAX_EXAMINED:
                    hits.next = postings.CURSOR + x.hex()  # x itself not yet read
                    break
                hits.examined += 1
                hit = self._confirm(snap, x, q, include_hidden, channels, authors, moderated, blocked, dropped, dropped_channels, names, hidden_users)
                if hit is None:
                    continue
                hits.append(hit)
                if len(hits) == limit:
                    hits.next = postings.CURSOR + (x + b"\x00").hex()
                    break
        finally:
            for p in opened:
                p.close()
        if hits.next is not None and len(hits) == limit and not self._more(snap, q, postings.cursor_start(hits.next), last):
            hits.next = None
        return hits

    def _more(self, snap, q: Query, first: bytes, last: bytes | None) -> bool:
        """Whether any candidate is left from ``first`` on (a full page's cursor is None when none is: a few seeks, no read)."""
        budget = [postings.MAX_SEEKS]
        conjuncts, opened = postings.conjuncts(snap, q, budget)
        try:
            for x, _ in postings.walk(snap, conjuncts, first, budget):
                return x is None or last is None or x <= last
            return False
        finally:
            for p in opened:
                p.close()

    def _confirm(self, snap, x, q, include_hidden, channels, authors, moderated, blocked, dropped, dropped_channels, names, hidden_users):
        """The hit for candidate ``x`` (an ``<rmono>``), or None when the post does not match or the filters leave it out."""
        h = search_view.posting_hash(x)
        blob = snap.get(POSTS + h)
        if blob is None:
            return None
        post = _checked_post(self.path, h, blob)
        text = search_view.searched_text(post)
        if not text or post.public_key in blocked or (dropped and snap.get(actions_view.dropped_post_key(h)) is not None):
            return None
        ch = canonical_channel(post.channel) if post.channel is not None else None
        if (channels and (len(channels) > 1 or ch not in channels)) or (dropped_channels and ch is not None and escape(ch) in dropped_channels):
            return None
        if authors and not authors.admit(post.public_key):
            return None
        spans = q.match(text)
        if spans is None:
            return None
        hider = None
        if moderated:
            if ch not in hidden_users:
                hidden_users[ch] = _hidden_users(snap, ch) if ch is not None else {}
            hider = hidden_by(snap, h, post, hidden_users[ch])
            if hider is not None and not include_hidden:
                return None
        if post.public_key not in names:
            names[post.public_key] = _text(snap.get(_name_key(post.public_key)))
        return SearchHit(h, post, bytes(blob), names[post.public_key], hider, tuple(tuple(s) for s in spans))

