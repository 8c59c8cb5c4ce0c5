"""The query language (STUB: the interface; the real parser replaces the bodies)."""

from __future__ import annotations

from dataclasses import dataclass, field

from cablestore.errors import QueryError

from .text import normalize


@dataclass(frozen=True)
class Lookup:
    """One index lookup: the postings of ``term``, or with ``prefix`` of every term starting with it."""

    term: str
    prefix: bool = False


@dataclass(frozen=True)
class Query:
    """A parsed query.

    ``lookups``: a conjunction of disjunctions: a post is a candidate when,
    for every inner tuple, it is indexed under at least one of its lookups.
    Never empty.  Candidates are then confirmed by :meth:`match`.
    ``channel``/``authors``/``before``/``after``: the filters ``in:``,
    ``from:`` (raw strings: names or key prefixes, the store resolves them),
    ``before:``/``after:`` (unix milliseconds, end exclusive / start inclusive, or None).
    """

    text: str
    lookups: tuple[tuple[Lookup, ...], ...]
    channel: str | None = None
    authors: tuple[str, ...] = ()
    before: int | None = None
    after: int | None = None
    excluded: tuple[str, ...] = field(default=())

    def match(self, text: str) -> list[tuple[int, int]] | None:
        """None when ``text`` does not satisfy the query's words, phrases,
        prefixes and exclusions; else the spans ``(start, end)`` (indices
        into ``text`` itself, sorted, not overlapping) to highlight."""
        norm = text.casefold()
        spans = []
        for alternatives in self.lookups:
            found = None
            for lk in alternatives:
                at = norm.find(lk.term)
                if at >= 0:
                    found = (at, at + len(lk.term))
                    break
            if found is None:
                return None
            spans.append(found)
        if any(x in norm for x in self.excluded):
            return None
        return sorted(set(spans))


def parse(query: str) -> Query:
    """Parse ``query``; :class:`cablestore.errors.QueryError` (one line) when it is not a query."""
    words = [w for w in normalize(query).split() if w]
    if not words:
        raise QueryError("empty search query: give at least one word")
    return Query(query, tuple((Lookup(w),) for w in words))
