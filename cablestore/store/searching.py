"""Full-text search of a store: :meth:`Searching.search`, mixed into :class:`cablestore.Store`.

The index is the ``search`` view (``views/search.py``: ``!search!<term>\\x00<mono>``),
kept by a store with search enabled.  A query (:func:`cablestore.search.parse`)
is a conjunction of disjunctions of lookups.  Each lookup is one term's
postings, read newest first in key order (the view keys them by the flipped
mono); a prefix lookup is the union of every term in its range (at most
:data:`MAX_PREFIX_TERMS`).  The conjuncts are intersected by leapfrogging:
each in turn moves to its first posting at or after the current candidate
(a few steps, else a seek), until all agree.
Each agreed candidate is read and confirmed by :meth:`Query.match` (phrases,
exclusions), then the filters apply: channel, authors, time, moderation.

Work per call is bounded: at most :data:`MAX_EXAMINED` candidates read and
:data:`MAX_SEEKS` iterator seeks.  A call that reaches either bound returns
what it found with a :attr:`SearchPage.next` cursor where it stopped, so a
caller pages on; ``next`` is None only when nothing is left.

What never matches: a deleted or dropped post, or one a block removed, is
gone from the store with its index rows (the removal's own WriteBatch); a
blocked user's posts a block did not remove (``drop = 0``) are left out
here; hidden posts (a hidden post, or a hidden user's, as
:meth:`cablestore.Store.messages` hides them) only with ``include_hidden``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cablestore.errors import QueryError, SearchNotEnabledError
from cablestore.keyspace.keys import MONO_SIZE, POSTS, SEARCH_KEY, HashLike, as_hash, canonical_channel, escape
from cablestore.search import Query, normalize, parse
from cablestore.store.reading import StoredPost, _checked_post, _hidden_users, _name_key, _text, hidden_by
from cablestore.views import actions as actions_view
from cablestore.views import blocks as blocks_view
from cablestore.views import search as search_view

__all__ = ["MAX_EXAMINED", "MAX_PREFIX_TERMS", "MAX_SEEKS", "SearchHit", "SearchPage", "Searching"]

MAX_EXAMINED = 2000
"""Candidates (posts indexed under every conjunct) one call reads and confirms at most."""
MAX_SEEKS = 20_000
"""Iterator seeks one call makes at most (a leapfrog over two frequent words that rarely meet)."""
MAX_PREFIX_TERMS = 256
"""Indexed terms one prefix lookup may expand to; a broader prefix is a :class:`QueryError`."""
MAX_LIMIT = 1000
_CURSOR = "s1."


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

    def __init__(self, hits=(), next: str | None = None, examined: int = 0) -> None:
        super().__init__(hits)
        self.next = next
        self.examined = examined


class _Postings:
    """One term's postings, newest first (``<rmono>`` ascending): :meth:`ge` is the first at or after a rank."""

    __slots__ = ("it", "prefix", "cur", "done", "budget")

    def __init__(self, snap, term_bytes: bytes, budget: list) -> None:
        self.prefix = search_view.PREFIX + term_bytes + search_view.END
        self.it = snap.iterator(prefix=self.prefix, include_value=False)
        self.cur: bytes | None = None  # the posting the iterator returned last
        self.done = False
        self.budget = budget

    def ge(self, r: bytes) -> bytes | None:
        """The first ``rmono >= r`` (None: none); ``r`` only grows.  A few steps, then a seek."""
        if self.done:
            return None
        cur = self.cur
        if cur is not None:
            if cur >= r:
                return cur
            n = len(self.prefix)
            for _ in range(_STEPS):  # a near target: stepping is 6x cheaper than a seek
                key = next(self.it, None)
                if key is None or not key.startswith(self.prefix):
                    self.done, self.cur = True, None
                    return None
                cur = self.cur = key[n:]
                if cur >= r:
                    return cur
        self.budget[0] -= 1
        self.it.seek(self.prefix + r)
        key = next(self.it, None)
        if key is None or not key.startswith(self.prefix):
            self.done, self.cur = True, None
            return None
        self.cur = key[len(self.prefix) :]
        return self.cur

    def close(self) -> None:
        self.it.close()


_STEPS = 3  # steps tried before a seek


class _Union:
    """A conjunct: the postings of any of its lookups."""

    __slots__ = ("parts",)

    def __init__(self, parts: list) -> None:
        self.parts = parts

    def ge(self, r: bytes) -> bytes | None:
        best = None
        for p in self.parts:
            v = p.ge(r)
            if v is not None and (best is None or v < best):
                best = v
        return best


def _terms_with_prefix(snap, prefix: str) -> list[bytes]:
    """Every indexed term starting with ``prefix`` (UTF-8), at most :data:`MAX_PREFIX_TERMS`."""
    start = len(search_view.PREFIX)
    found = []
    with snap.iterator(prefix=search_view.PREFIX + prefix.encode("utf-8"), include_value=False) as it:
        for key in it:
            term = key[start : key.index(search_view.END, start)]
            if len(found) == MAX_PREFIX_TERMS:
                raise QueryError(f"{prefix}* matches more than {MAX_PREFIX_TERMS} indexed words: give it more letters")
            found.append(term)
            it.seek(search_view.PREFIX + term + b"\x01")  # past every posting of this term
    return found


def _conjuncts(snap, query: Query, budget: list) -> tuple[list, list]:
    """``(conjuncts, every postings iterator)`` of a parsed query."""
    opened: list = []
    out = []
    for alternatives in query.lookups:
        parts = []
        for lk in alternatives:
            terms = _terms_with_prefix(snap, lk.term) if lk.prefix else [lk.term.encode("utf-8")]
            for t in terms:
                p = _Postings(snap, t, budget)
                opened.append(p)
                parts.append(p)
        out.append(parts[0] if len(parts) == 1 else _Union(parts))
    return out, opened


def _leapfrog(conjuncts: list, r: bytes, budget: list):
    """Yield ``(rmono, None)`` of the posts under every conjunct, newest first, from ``r`` on;
    ``(None, r)`` when the seek budget ran out (``r``: where to go on)."""
    n = len(conjuncts)
    while True:
        if budget[0] <= 0:
            yield None, r
            return
        x = conjuncts[0].ge(r)
        if x is None:
            return
        agree, i = 1, 1
        while agree < n:
            if budget[0] <= 0:
                yield None, x  # nothing before x is left
                return
            y = conjuncts[i % n].ge(x)
            if y is None:
                return
            if y == x:
                agree += 1
            else:
                x, agree = y, 1
            i += 1
        yield x, None
        r = x + b"\x00"


def _cursor_start(cursor: str | None) -> bytes:
    """Where a page starts, as an ``<rmono>`` bound (inclusive)."""
    if cursor is None:
        return b""
    bad = QueryError(f"not a search cursor: {cursor!r} (pass a SearchPage.next)")
    if not isinstance(cursor, str) or not cursor.startswith(_CURSOR):
        raise bad
    try:
        r = bytes.fromhex(cursor[len(_CURSOR) :])
    except ValueError:
        raise bad from None
    if not 0 < len(r) <= MONO_SIZE + 1:
        raise bad
    return r


def _time_bounds(query: Query, start: int, end: int) -> tuple[bytes, bytes | None]:
    """``(first, last)`` ``<rmono>`` bounds (both inclusive; last None: none) of ``[max(start, after), min(end, before))``."""
    for name, value in (("start", start), ("end", end)):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 64:
            raise QueryError(f"{name} is a timestamp in ms (an int from 0 to 2**64-1), not {value!r}")
    lo = max(start, query.after or 0)
    his = [v for v in (end or None, query.before) if v is not None]
    first = b"" if not his else search_view.flip(min(his).to_bytes(8, "big") + bytes(32)) + b"\x00"  # mono < end
    last = None if not lo else search_view.flip(lo.to_bytes(8, "big") + bytes(32))  # mono >= start
    return first, last


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
    from cablestore.store.users import _names

    out: dict[str, set[bytes]] = {}
    for pk, name in _names(snap).items():
        if name is not None:
            out.setdefault(normalize(name), set()).add(pk)
    return out


def _moderation(snap) -> tuple[bool, set, set, set]:
    """``(anything hidden, blocked users, dropped posts, dropped channels)`` as the store holds them now."""
    hidden = any(True for prefix in (actions_view.PREFIX + b"h", actions_view.PREFIX + b"u") for _ in snap.iterator(prefix=prefix, include_value=False))
    bp = blocks_view.PREFIX + b"b"
    blocked = {k[len(bp) :] for k in snap.iterator(prefix=bp, include_value=False)}
    dp, xp = actions_view.PREFIX + b"d", actions_view.PREFIX + b"x"
    dropped = {k[len(dp) :] for k in snap.iterator(prefix=dp, include_value=False)}
    channels = {k[len(xp) :] for k in snap.iterator(prefix=xp, include_value=False)}
    return hidden, blocked, dropped, channels


class Searching:
    """Mixed into Store; expects ``self.db``, ``self.path`` and ``self._search_enabled()``."""

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
        first, last = _time_bounds(q, start, end)
        first = max(first, _cursor_start(cursor))
        channels = {canonical_channel(c) for c in (channel, q.channel) if c is not None}
        if any(not isinstance(c, str) for c in (channel,) if c is not None):
            raise QueryError(f"a channel name is a str, not {type(channel).__name__}")
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
        budget = [MAX_SEEKS]
        conjuncts, opened = _conjuncts(snap, q, budget)
        hits = SearchPage()
        names: dict[bytes, str | None] = {}
        hidden_users: dict[str, dict] = {}
        try:
            for x, stop in _leapfrog(conjuncts, first, budget):
                if x is None:  # out of seeks: go on from ``stop``
                    hits.next = _CURSOR + stop.hex()
                    break
                if last is not None and x > last:
                    break
                if hits.examined == MAX_EXAMINED:
                    hits.next = _CURSOR + x.hex()  # x itself not yet read
                    break
                hits.examined += 1
                hit = self._confirm(snap, x, q, include_hidden, channels, authors, moderated, blocked, dropped, dropped_channels, names, hidden_users)
                if hit is None:
                    continue
                hits.append(hit)
                if len(hits) == limit:
                    hits.next = _CURSOR + (x + b"\x00").hex()
                    break
        finally:
            for p in opened:
                p.close()
        if hits.next is not None and len(hits) == limit and not self._more(snap, q, _cursor_start(hits.next), last):
            hits.next = None
        return hits

    def _more(self, snap, q: Query, first: bytes, last: bytes | None) -> bool:
        """Whether any candidate is left from ``first`` on (a full page's cursor is None when none is: a few seeks, no read)."""
        budget = [MAX_SEEKS]
        conjuncts, opened = _conjuncts(snap, q, budget)
        try:
            for x, _ in _leapfrog(conjuncts, first, budget):
                return x is None or last is None or x <= last
            return False
        finally:
            for p in opened:
                p.close()

    def _confirm(self, snap, x, q, include_hidden, channels, authors, moderated, blocked, dropped, dropped_channels, names, hidden_users):
        """The hit for candidate ``x`` (an ``<rmono>``), or None when the post does not match or the filters leave it out."""
        h = search_view.flip(x)[8:]
        blob = snap.get(POSTS + h)
        if blob is None:
            return None
        post = _checked_post(self.path, h, blob)
        text = search_view.searched_text(post)
        if not text or post.public_key in blocked or h in dropped:
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

