"""The postings of the search view and how a query walks them (``Store.search`` runs them).

A term's postings are its ``!search!<term>\\x00<rmono>`` keys: newest first
in key order (``views/search.py``).  :class:`Postings` walks one term's
forward, a few steps and then a seek; :class:`Union` is a conjunct of
several lookups (a prefix: every term in its range, at most
:data:`MAX_PREFIX_TERMS`); :func:`leapfrog` intersects the conjuncts, each in
turn moving to its first posting at or after the current candidate until
all agree, within a budget of :data:`MAX_SEEKS` seeks.  Positions are
``<rmono>`` values: a page's cursor is one, and so are the time bounds.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from typing import Any

from cablestore.errors import CableError, QueryError
from cablestore.keyspace.keys import MONO_SIZE, POSTS
from cablestore.keyspace.records import Indexed
from cablestore.search import Query
from cablestore.views import search as search_view
from cablestore.wire.codec import TEXT, TOPIC, decode_post, post_type_of

MAX_SEEKS = 20_000
"""Iterator seeks one search makes at most (a leapfrog over two frequent words that rarely meet)."""
MAX_PREFIX_TERMS = 256
"""Indexed terms one prefix lookup may expand to; a broader prefix is a :class:`QueryError`."""
CURSOR = "s1."  # what starts a page cursor: then an ``<rmono>`` in hex


class Postings:
    """One term's postings, newest first (``<rmono>`` ascending): :meth:`ge` is the first at or after a rank."""

    __slots__ = ("it", "prefix", "cur", "done", "budget")

    def __init__(self, snap: Any, term_bytes: bytes, budget: list) -> None:
        self.prefix = search_view.postings_prefix(term_bytes)
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
                key = next(self.it, None)  # (the iterator's prefix bounds it: None past the term)
                if key is None:
                    self.done, self.cur = True, None
                    return None
                cur = self.cur = key[n:]
                if cur >= r:
                    return cur
        self.budget[0] -= 1
        self.it.seek(self.prefix + r)
        return self._next()

    def step(self) -> bytes | None:
        """The posting after the current one (None: none)."""
        if self.done:
            return None
        return self._next()

    def _next(self) -> bytes | None:
        key = next(self.it, None)
        if key is None:
            self.done, self.cur = True, None
            return None
        self.cur = key[len(self.prefix) :]
        return self.cur

    def reach(self, r: bytes, steps: int) -> bytes | None:
        """Where ``steps`` postings from ``r`` on end (None: fewer are left), leaving the walk to start over."""
        x = self.ge(r)
        for _ in range(steps):
            if x is None:
                break
            x = self.step()
        self.cur, self.done = None, False
        return x

    def close(self) -> None:
        """Close the iterator."""
        self.it.close()


_STEPS = 3  # steps tried before a seek


class Union:
    """A conjunct: the postings of any of its lookups."""

    __slots__ = ("parts",)

    def __init__(self, parts: list) -> None:
        self.parts = parts

    def ge(self, r: bytes) -> bytes | None:
        """The first ``rmono >= r`` any of the lookups holds (None: none)."""
        best = None
        for p in self.parts:
            v = p.ge(r)
            if v is not None and (best is None or v < best):
                best = v
        return best


def terms_with_prefix(snap: Any, prefix: str) -> list[bytes]:
    """Every indexed term starting with ``prefix`` (UTF-8), at most :data:`MAX_PREFIX_TERMS`."""
    found = []
    with snap.iterator(prefix=search_view.terms_prefix(prefix), include_value=False) as it:
        for key in it:
            term = search_view.term_of_key(key)
            if len(found) == MAX_PREFIX_TERMS:
                raise QueryError(f"{prefix}* matches more than {MAX_PREFIX_TERMS} indexed words: give it more letters")
            found.append(term)
            it.seek(search_view.past_postings(term))
    return found


def conjuncts(snap: Any, query: Query, budget: list) -> tuple[list, list]:
    """``(conjuncts, every postings iterator)`` of a parsed query."""
    opened: list = []
    out = []
    for alternatives in query.lookups:
        parts = []
        for lk in alternatives:
            terms = terms_with_prefix(snap, lk.term) if lk.prefix else [lk.term.encode("utf-8")]
            for t in terms:
                p = Postings(snap, t, budget)
                opened.append(p)
                parts.append(p)
        out.append(parts[0] if len(parts) == 1 else Union(parts))
    return out, opened


_SAMPLE = 32  # postings each term is stepped through to tell the sparsest


def walk(snap: Any, conjuncts: list, r: bytes, budget: list) -> Iterator[tuple]:
    """:func:`leapfrog`, or when every conjunct is one term, :func:`probe` from the sparsest."""
    if len(conjuncts) < 2 or not all(isinstance(c, Postings) for c in conjuncts):
        return leapfrog(conjuncts, r, budget)
    reached = [(c.reach(r, _SAMPLE), i) for i, c in enumerate(conjuncts)]
    budget[0] -= len(conjuncts)
    # Sparsest first: exhausted (None) sorts first, then the furthest reached (the largest rmono).
    order = [conjuncts[i] for _, i in sorted(reached, key=_sparsest_first)]
    return probe(snap.get, order[0], [c.prefix for c in order[1:]], r, budget)


def _sparsest_first(reached: tuple) -> tuple:
    x, i = reached
    return (0, b"", i) if x is None else (1, search_view.flip(x), i)


def probe(get: Callable[[bytes], bytes | None], driver: Postings, others: list, r: bytes, budget: list) -> Iterator[tuple]:
    """Yield ``(rmono, None)`` of the driver's postings that every other term's postings hold too (one point
    read each: LevelDB's bloom filters answer most misses), from ``r`` on; ``(None, r)`` when the budget ran out.

    The driver is the sparsest term: a walk of its postings in key order
    (a step each, 6x cheaper than a seek) costs less than a leapfrog's seeks
    into the dense one (measured: about half at 100k posts).
    """
    start, x = r, driver.ge(r)
    if x is not None and len(others) == 1:  # two terms, the common case: the driver's keys read straight off its iterator
        other, n, it = others[0], len(driver.prefix), driver.it
        while True:
            if budget[0] <= 0 and x > start:
                yield None, x
                return
            budget[0] -= 1
            if get(other + x) is not None:
                yield x, None
            key = next(it, None)
            if key is None:
                return
            x = key[n:]
    while x is not None:
        if budget[0] <= 0 and x > start:  # (a page always gets past where it started)
            yield None, x
            return
        for prefix in others:
            budget[0] -= 1
            if get(prefix + x) is None:
                break
        else:
            yield x, None
        x = driver.step()


def leapfrog(conjuncts: list, r: bytes, budget: list) -> Iterator[tuple]:
    """Yield ``(rmono, None)`` of the posts under every conjunct, newest first, from ``r`` on;
    ``(None, r)`` when the seek budget ran out (``r``: where to go on)."""
    n, start = len(conjuncts), r
    while True:
        if budget[0] <= 0 and r > start:  # (a page always gets past where it started)
            yield None, r
            return
        x = conjuncts[0].ge(r)
        if x is None:
            return
        agree, i = 1, 1
        while agree < n:
            if budget[0] <= 0 and x > start:
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


def cursor_start(cursor: str | None) -> bytes:
    """Where a page starts, as an ``<rmono>`` bound (inclusive)."""
    if cursor is None:
        return b""
    bad = QueryError(f"not a search cursor: {cursor!r} (pass a SearchPage.next)")
    if not isinstance(cursor, str) or not cursor.startswith(CURSOR):
        raise bad
    try:
        r = bytes.fromhex(cursor[len(CURSOR) :])
    except ValueError:
        raise bad from None
    if not 0 < len(r) <= MONO_SIZE + 1:
        raise bad
    return r


def time_bounds(query: Query, start: int, end: int) -> tuple[bytes, bytes | None]:
    """``(first, last)`` ``<rmono>`` bounds (both inclusive; last None: none) of ``[max(start, after), min(end, before))``."""
    for name, value in (("start", start), ("end", end)):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 64:
            raise QueryError(f"{name} is a timestamp in ms (an int from 0 to 2**64-1), not {value!r}")
    lo = max(start, query.after or 0)
    his = [v for v in (end or None, query.before) if v is not None]
    first = b"" if not his else search_view.flip(min(his).to_bytes(8, "big") + bytes(32)) + b"\x00"  # mono < end
    last = None if not lo else search_view.flip(lo.to_bytes(8, "big") + bytes(32))  # mono >= start
    return first, last


def index_entries(snap: Any, skip: Collection[bytes] = frozenset()) -> Iterator[tuple[bytes, bytes]]:
    """The search entries (``views/search.py``) of every indexed post of a store, in hash order
    (what ``enable_search`` and ``reindex`` write).  ``skip``: hashes of stored posts that are not
    indexed (the reindex's faults); a damaged post is skipped here too."""
    start, searched = len(POSTS), (TEXT, TOPIC)
    for key, blob in snap.iterator(prefix=POSTS):
        h = key[start:]
        if post_type_of(blob) not in searched or h in skip:
            continue
        try:
            post = decode_post(blob)
        except CableError:
            continue  # a damaged post: ``check`` reports it, and a repair sets it aside
        yield from search_view.entries(Indexed.of(blob, post, h))
