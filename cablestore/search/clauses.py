"""The clauses of a query: what one word, prefix or phrase looks up in the
index, and how it is found in a text.

Four kinds, chosen by what the normalized word holds (see :mod:`.text` for W
and S characters):

- ``word``: only W characters (``deploy``, ``depl*``): equal to a word of the
  text (or, as a prefix, the start of one), found as a substring whose ends
  are word boundaries;
- ``chunk``: W and other characters, no S (``c++20``, ``#general``, a URL):
  equal to a chunk of the text (or its start), both stripped of sentence
  punctuation;
- ``substring``: S characters (``京都``, ``東京tower``): a substring of the
  text, whose W ends are word boundaries (an ending W run may be a prefix);
- ``phrase``: a quoted phrase: its atoms (words and S characters) next to each
  other in the text, in order; between two atoms the phrase has nothing, the
  text must have nothing; where the phrase has spaces or punctuation, the text
  may have any (``"c++20"`` finds ``C++20/C++23``).

Each lookup of a clause names a term :func:`.text.index_terms` gives any
text the clause is found in: that is what makes the index complete.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from cablestore.errors import QueryError

from .text import STRIP, Normalized, chunk_term, classes, cut, normalize

WORD, CHUNK, SUBSTRING, PHRASE = "word", "chunk", "substring", "phrase"
MIN_PREFIX = 2  # characters; shorter would expand to most of the index (every word starting with "d")


@dataclass(frozen=True)
class Lookup:
    """One index lookup: the postings of ``term``, or with ``prefix`` of every term starting with it."""

    term: str
    prefix: bool = False


@dataclass(frozen=True)
class Clause:
    """One word, prefix or phrase of a query, normalized.

    ``kind``: :data:`WORD`, :data:`CHUNK`, :data:`SUBSTRING` or :data:`PHRASE`;
    ``text``: its normalized text; ``prefix``: whether it was written with
    ``*``; ``atoms`` (phrases): ``(atom, next to the next atom)``.
    """

    kind: str
    text: str
    prefix: bool = False
    atoms: tuple[tuple[str, bool], ...] = ()

    def lookups(self) -> list[tuple[Lookup, ...]]:
        """The lookups a text that has this clause is indexed under, all of them (one alternative each)."""
        if self.kind in (WORD, CHUNK):
            return [(Lookup(cut(self.text), self.prefix),)]
        if self.kind == PHRASE:
            out, run = [], ""
            nospace = [bool(classes(atom).nospace.fullmatch(atom)) for atom, _ in self.atoms]
            for i, (atom, joined) in enumerate(self.atoms):
                if not nospace[i]:
                    out.append((Lookup(cut(atom)),))
                    continue
                run += atom
                if not (joined and nospace[i + 1]):  # the run of S characters next to each other ends here
                    out += _run_lookups(run)
                    run = ""
            return out
        cls, out = classes(self.text), []
        for m in cls.word.finditer(self.text):
            out.append((Lookup(cut(m.group()), self.prefix and m.end() == len(self.text)),))
        for m in cls.nospace.finditer(self.text):
            out += _run_lookups(m.group())
        return out

    def find(self, doc: Normalized) -> list[tuple[int, int]]:
        """Where this clause is in ``doc``: spans of ``doc.text``, empty when it is not there."""
        t = self.text
        if (self.atoms[0][0] if self.atoms else t) not in doc.text:  # the usual miss, without tokenizing
            return []
        if self.kind == CHUNK:
            if self.prefix:
                return [(a, b) for chunk, a, b in doc.chunks() if chunk.startswith(t)]
            return [(a, b) for chunk, a, b in doc.chunks() if chunk == t]
        if self.kind == PHRASE:
            if doc.text.isascii() and not _ascii_phrase(self.atoms).search(doc.text):
                return []  # the usual miss of a phrase of common words, without cutting the text into atoms
            return self._find_phrase(doc.atoms())
        if self.kind == WORD:  # a word: a substring of whole words (or, as a prefix, the start of one)
            word_start, word_end = True, not self.prefix
        else:
            cls = classes(t)
            word_start = cls.word_char.match(t, 0) is not None
            word_end = not self.prefix and cls.word_char.match(t, len(t) - 1) is not None
        spans = []
        at = doc.text.find(t)
        while at >= 0:
            end = at + len(t)
            if not (word_start and doc.is_word_char(at - 1)) and not (word_end and doc.is_word_char(end)):
                spans.append((at, doc.word_end(end) if self.prefix and self.kind == WORD else end))
            at = doc.text.find(t, at + 1)
        return spans

    def _find_phrase(self, atoms: list[tuple[str, int, int]]) -> list[tuple[int, int]]:
        want, spans = self.atoms, []
        for j in range(len(atoms) - len(want) + 1):
            for k, (atom, joined) in enumerate(want):
                here = atoms[j + k]
                if here[0] != atom or (joined and here[2] != atoms[j + k + 1][1]):
                    break
            else:
                spans.append((atoms[j][1], atoms[j + len(want) - 1][2]))
        return spans


@lru_cache(maxsize=256)
def _ascii_phrase(atoms: tuple[tuple[str, bool], ...]) -> re.Pattern:
    """What every ASCII text holding the phrase matches: its atoms in order, nothing between two the phrase
    joins, and elsewhere only characters no atom holds (in ASCII text an atom is ``[a-z0-9]+``).  A test that
    can only rule a text out: :meth:`Clause._find_phrase` decides."""
    return re.compile("".join(re.escape(atom) + ("" if joined else "[^a-z0-9]*") for atom, joined in atoms))


def _run_lookups(run: str) -> list[tuple[Lookup, ...]]:
    """Lookups for a run of S characters: the character alone, or pairs covering the run."""
    if len(run) <= 1:
        return [(Lookup(run),)] if run else []
    at = list(range(0, len(run) - 1, 2))
    if at[-1] != len(run) - 2:
        at.append(len(run) - 2)
    return [(Lookup(run[i : i + 2]),) for i in at]


def word_clauses(raw: str, prefix: bool = False) -> list[Clause]:
    """The clauses of one unquoted word of a query (``raw`` without its ``-`` or ``*``).

    Usually one; none for a word without letters or digits (``--``, ``→``);
    several when normalizing puts a space in it (NFKC turns ``¨`` into one).
    """
    pieces = normalize(raw).split()
    out = []
    for i, piece in enumerate(pieces):
        is_prefix = prefix and i == len(pieces) - 1
        piece = piece.strip(STRIP)
        clause = _clause(piece, is_prefix) if piece else None
        if clause is not None:
            out.append(clause)
    if prefix and not (out and out[-1].prefix):
        raise QueryError(f"{raw}*: a prefix needs letters or digits before the *, as in depl*")
    return out


def _clause(piece: str, prefix: bool) -> Clause | None:
    cls = classes(piece)
    if cls.nospace.search(piece):
        return Clause(SUBSTRING, piece, prefix)
    if cls.word.fullmatch(piece):
        kind = WORD
    elif chunk_term(piece) is not None:
        kind = CHUNK
    else:
        return None
    if prefix and len(piece) < MIN_PREFIX:
        raise QueryError(
            f"{piece}*: a prefix needs at least {MIN_PREFIX} characters (a shorter one would match most of the index)"
        )
    return Clause(kind, piece, prefix)


def phrase_clause(raw: str) -> Clause | None:
    """The clause of a quoted phrase (``raw`` without its quotes); None when it has no letters or digits."""
    norm = normalize(raw)
    found = list(classes(norm).atoms.finditer(norm))
    if not found:
        return None
    if len(found) == 1 and not classes(norm).nospace.fullmatch(found[0].group()):  # one word: as if unquoted
        return Clause(WORD, found[0].group())
    atoms = tuple(
        (m.group(), i + 1 < len(found) and found[i + 1].start() == m.end()) for i, m in enumerate(found)
    )
    return Clause(PHRASE, " ".join(norm.split()), atoms=atoms)


def find_all(clauses: tuple[Clause, ...], doc: Normalized) -> list[list[tuple[int, int]]] | None:
    """Each clause's spans in ``doc``, or None as soon as one is not there."""
    out = []
    for clause in clauses:
        spans = clause.find(doc)
        if not spans:
            return None
        out.append(spans)
    return out

