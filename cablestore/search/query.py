"""The query language: :func:`parse` turns a query string into a :class:`Query`,
whose :attr:`Query.lookups` the store looks up in the index and whose
:meth:`Query.match` confirms each candidate on its text.  The language is
:data:`SYNTAX`; docs/search.md explains it.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from cablestore.errors import QueryError

from .clauses import Clause, Lookup, find_all, phrase_clause, word_clauses
from .text import Normalized

__all__ = ["MAX_QUERY_BYTES", "MAX_TERMS", "SYNTAX", "Lookup", "Query", "parse"]

MAX_QUERY_BYTES = 1024
MAX_TERMS = 32  # lookups and exclusions of one query
MAX_FILTER_CHARS = 64  # a channel name has at most 64 code points, a public key 64 hex digits

SYNTAX = """\
deploy friday     posts with every word, in any order; no stop words: the, a, is count
"deploy friday"   a phrase: these words next to each other, in this order
depl*             words starting with depl (at least 2 characters, 1 in Chinese, Japanese, Korean)
-word  -"a b"     leave out posts with this word or phrase
in:dev            only in channel dev (in:#dev too)
from:alice        only by alice: a name (@alice too) or a public key's first hex digits; several: any
after:2024-05-01  on or after that day (UTC); before:2024-05-01 is strictly before it
                  a time too: after:2024-05-01T14:30 or before:2024-05-01T14:30:15Z
Case, accents and width do not matter: cafe finds Café, straße finds STRASSE.
Words with punctuation match as written: C++20, v1.2.3, #general, @alice, URLs;
their letters and digits are words too: example finds https://example.org/a.
Chinese, Japanese, Korean, Thai, Lao, Khmer, Myanmar match any part: 京都 finds 東京都.
"""

_FILTER = re.compile(r"(in|from|before|after):", re.I)
_DATE = re.compile(r"(\d{4})-(\d\d)-(\d\d)(?:T(\d\d):(\d\d)(?::(\d\d))?Z?)?", re.I)


@dataclass(frozen=True)
class Query:
    """A parsed query (made by :func:`parse`).

    ``lookups``: a conjunction of disjunctions: a post is a candidate when,
    for every inner tuple, it is indexed under at least one of its lookups.
    Never empty.  Candidates are then confirmed by :meth:`match`.
    ``channel``/``authors``/``before``/``after``: the filters ``in:``,
    ``from:`` (raw strings: names or key prefixes, the store resolves them),
    ``before:``/``after:`` (unix milliseconds, end exclusive / start inclusive, or None).
    ``excluded``: the excluded words and phrases, normalized.
    ``clauses``/``exclusions``: what :meth:`match` looks for and rejects.
    """

    text: str
    lookups: tuple[tuple[Lookup, ...], ...]
    channel: str | None = None
    authors: tuple[str, ...] = ()
    before: int | None = None
    after: int | None = None
    excluded: tuple[str, ...] = field(default=())
    clauses: tuple[Clause, ...] = ()
    exclusions: tuple[Clause, ...] = ()

    def match(self, text: str) -> list[tuple[int, int]] | None:
        """None when ``text`` does not satisfy the query's words, phrases,
        prefixes and exclusions; else the spans ``(start, end)`` (indices
        into ``text`` itself, sorted, not overlapping) to highlight."""
        if not self.clauses:  # not made by parse()
            return None
        doc = Normalized(text)
        found = find_all(self.clauses, doc)
        if found is None or any(c.find(doc) for c in self.exclusions):
            return None
        spans: list[tuple[int, int]] = []
        for start, end in sorted(doc.span(a, b) for each in found for a, b in each):
            if spans and start <= spans[-1][1]:
                spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
            else:
                spans.append((start, end))
        return spans


def parse(query: str) -> Query:
    """Parse ``query``; :class:`cablestore.errors.QueryError` (one line) when it is not a query."""
    if not isinstance(query, str):
        raise QueryError(f"a search query is a str, not {type(query).__name__}")
    try:
        size = len(query.encode("utf-8"))
    except UnicodeEncodeError:
        raise QueryError("the search query is not valid Unicode text (a lone surrogate)") from None
    if size > MAX_QUERY_BYTES:
        raise QueryError(f"search query too long: at most {MAX_QUERY_BYTES} bytes")
    clauses: list[Clause] = []
    exclusions: list[Clause] = []
    filters: dict[str, list[str]] = {"in": [], "from": [], "before": [], "after": []}
    for negated, kind, value in _tokens(query):
        if kind == "filter":
            name, arg = value
            if negated:
                raise QueryError(f"-{name}:{arg}: a filter cannot be negated, only words and phrases")
            if not arg:
                raise QueryError(f"{name}: needs a value, as in {_EXAMPLE[name]}")
            filters[name].append(arg)
            continue
        if kind == "phrase":
            found = [c] if (c := phrase_clause(value)) else []
        else:
            prefix = value.endswith("*")
            found = word_clauses(value[:-1] if prefix else value, prefix)
        (exclusions if negated else clauses).extend(found)
    clauses, exclusions = _unique(clauses), _unique(exclusions)
    if not clauses:
        raise QueryError("a search needs at least one word to find (filters and -exclusions only narrow it)")
    lookups = _unique([lk for c in clauses for lk in c.lookups()])
    if len(lookups) + len(exclusions) > MAX_TERMS:
        raise QueryError(f"too many search terms: {len(lookups) + len(exclusions)}, at most {MAX_TERMS}")
    channel = _channel(filters["in"])
    before = min((_date("before", d) for d in filters["before"]), default=None)
    after = max((_date("after", d) for d in filters["after"]), default=None)
    if before is not None and after is not None and after >= before:
        raise QueryError("after: is not earlier than before:, so nothing can match")
    authors = []
    for who in filters["from"]:
        who = who[1:] if who.startswith("@") else who
        if not who or len(who) > MAX_FILTER_CHARS:
            raise QueryError(f"from:{who[:16]}: a name or key prefix has 1 to {MAX_FILTER_CHARS} characters")
        if who not in authors:
            authors.append(who)
    return Query(
        query, tuple(lookups), channel, tuple(authors), before, after,
        tuple(c.text for c in exclusions), tuple(clauses), tuple(exclusions),
    )


_EXAMPLE = {"in": "in:dev", "from": "from:alice", "before": "before:2024-05-01", "after": "after:2024-05-01"}


def _tokens(query: str):
    """``(negated, kind, value)`` for each part of ``query``: kind ``word`` (value: the word), ``phrase``
    (the text between the quotes) or ``filter`` (value: ``(name, argument)``)."""
    i, n = 0, len(query)
    while i < n:
        if query[i].isspace():
            i += 1
            continue
        negated = query[i] == "-" and i + 1 < n and not query[i + 1].isspace()
        i += negated
        m = _FILTER.match(query, i)
        if m:
            arg, i = _quoted(query, m.end()) if query.startswith('"', m.end()) else _word(query, m.end())
            yield negated, "filter", (m.group(1).lower(), arg)
        elif query[i] == '"':
            phrase, i = _quoted(query, i)
            if i < n and not query[i].isspace():
                raise QueryError(f'put a space after the closing quote of "{phrase}"')
            yield negated, "phrase", phrase
        else:
            word, i = _word(query, i)
            yield negated, "word", word


def _quoted(query: str, i: int) -> tuple[str, int]:
    """The text between the quote at ``i`` and the next one, and the index after it."""
    end = query.find('"', i + 1)
    if end < 0:
        raise QueryError(f"unclosed quote in the search query: {query[i:i + 40]}")
    return query[i + 1 : end], end + 1


def _word(query: str, i: int) -> tuple[str, int]:
    end = i
    while end < len(query) and not query[end].isspace():
        end += 1
    return query[i:end], end


def _channel(names: list[str]) -> str | None:
    found = {name[1:] if name.startswith("#") else name for name in names}
    if len(found) > 1:
        raise QueryError(f"one in: per search, not {len(found)} ({', '.join(sorted(found))})")
    if not found:
        return None
    channel = found.pop()
    if not channel or len(channel) > MAX_FILTER_CHARS:
        raise QueryError(f"in:{channel[:16]}: a channel name has 1 to {MAX_FILTER_CHARS} characters")
    return channel


def _date(name: str, value: str) -> int:
    """``value`` (YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS][Z], UTC) in unix milliseconds."""
    m = _DATE.fullmatch(value)
    try:
        if not m:
            raise ValueError
        moment = datetime(*(int(g) for g in m.groups() if g is not None))
    except ValueError:
        raise QueryError(f"{name}:{value}: not a date; use YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS] (UTC)") from None
    if moment.year < 1970:
        raise QueryError(f"{name}:{value}: dates start at 1970-01-01")
    return calendar.timegm(moment.timetuple()) * 1000


def _unique(items: list) -> list:
    return list(dict.fromkeys(items))


def marked(text: str, spans: Iterable[tuple[int, int]]) -> list[tuple[str, bool]]:
    """``text`` as ``(piece, matched)`` pairs, in order: the ``(start, end)`` spans matched (overlaps merged, out-of-range clipped)."""
    out: list[tuple[str, bool]] = []
    at = 0
    for start, end in sorted((max(0, s), min(len(text), e)) for s, e in spans):
        start = max(start, at)
        if end <= start:
            continue
        if start > at:
            out.append((text[at:start], False))
        if out and out[-1][1] and start == at:  # overlapping or touching spans: one mark
            out[-1] = (out[-1][0] + text[start:end], True)
        else:
            out.append((text[start:end], True))
        at = end
    if at < len(text) or not out:
        out.append((text[at:], False))
    return out
