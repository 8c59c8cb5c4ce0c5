"""Text normalization and index terms: the one set of rules that cuts a post's
text into the terms the index holds and a query's words into the terms it
looks up, so that what :meth:`Query.match` can accept is always indexed.

The rules (docs/search.md says them for users):

- **normalize**: NFKC, casefold, NFKC again; ``’ ‘ ʼ`` become ``'`` and NUL
  a space; the accents dropped (NFD, the combining diacritics used with
  Latin, Greek and Cyrillic, Hebrew points, Arabic harakat and variation
  selectors removed, NFC).
  So ``café``, ``CAFÉ``, ``cafe`` and ``ｃａｆｅ`` are all ``cafe``, and
  ``Straße`` is ``strasse``.  The marks that are letters of their script
  (Japanese dakuten, Thai vowels, Devanagari signs) are kept.  Pure ASCII
  text only needs ``lower()``.
- **word characters** (W): letters, digits and marks (Unicode categories L,
  N, M), but for the scripts written without spaces.  ``_`` and ``'`` are not
  word characters: ``foo_bar`` and ``don't`` are each two words.
- **no-space characters** (S): the letters and marks of Han, Hiragana,
  Katakana, Hangul, Bopomofo, Thai, Lao, Khmer, Myanmar, Tai, Tangut.
- **terms** of a text: its words (maximal runs of W); each S character and
  each pair of consecutive S characters; and each whitespace-separated chunk,
  its leading and trailing sentence punctuation (:data:`STRIP`) removed, when
  it holds a W character, another character that is not W, and no S
  character (``c++20``, ``v1.2.3``, ``#general``, ``@alice``, URLs, ``e-mail``).
  A term longer than :data:`MAX_TERM_BYTES` UTF-8 bytes is cut to that many,
  at a character boundary.  Only the first :data:`MAX_INDEXED_CHARS`
  characters of a text count (a Cable post's text is at most 4096 bytes),
  and of their normalized form the first :data:`MAX_NORMALIZED_CHARS`: a text
  has at most about two terms per normalized character.
"""

from __future__ import annotations

import re
import unicodedata
from functools import cache
from types import SimpleNamespace

MAX_TERM_BYTES = 64
MAX_INDEXED_CHARS = 4096  # wire.fields.MAX_TEXT_BYTES: no Cable post/text has more characters
MAX_NORMALIZED_CHARS = 2 * MAX_INDEXED_CHARS  # NFKC may lengthen text (ﷺ is 18 characters): at most 2 terms each
# The version of these rules: an index written under other rules (or another
# Unicode database) may lack terms a query now looks up, so it is rebuilt.
RULES_VERSION = f"1 unicode {unicodedata.unidata_version}"

# Sentence punctuation, quotes, brackets, dashes and Markdown emphasis around a
# chunk, removed from both ends (``#``, ``@``, ``+``, ``/``, ``$``, ``%`` stay).
STRIP = "\"'.,;:!?()[]{}<>«»‹›“”„‟‚‛…*_~`¡¿-‐–—。、，．！？；：「」『』【】〈〉《》〔〕"

_FOLD = (("\u2018", "'"), ("\u2019", "'"), ("\u02bc", "'"), ("\x00", " "))
_ACCENT_BLOCKS = (
    (0x0300, 0x036F), (0x0483, 0x0489), (0x0591, 0x05C7), (0x0610, 0x061A), (0x064B, 0x065F), (0x0670, 0x0670),
    (0x06D6, 0x06ED), (0x1AB0, 0x1AFF), (0x1DC0, 0x1DFF), (0x20D0, 0x20FF), (0xFE00, 0xFE0F), (0xFE20, 0xFE2F),
    (0xE0100, 0xE01EF),
)
_ACCENTS = re.compile(
    "["
    + "".join(
        re.escape(chr(c)) for a, b in _ACCENT_BLOCKS[:-1] for c in range(a, b + 1) if unicodedata.category(chr(c)) == "Mn"
    )
    + "\U000e0100-\U000e01ef]"  # one range: a class with many characters outside the BMP is slow
)
# Every character whose canonical decomposition holds one of _ACCENTS is in these blocks (a test checks).
_MAYBE_ACCENTED = re.compile("[\u00c0-\u06ff\u1ab0-\u1fff\u20d0-\u22ff\ufb1d-\ufb4f\ufe00-\ufe2f\U000e0100-\U000e01ef]")
_NOSPACE_BLOCKS = (
    (0x0E00, 0x0EFF), (0x1000, 0x109F), (0x1100, 0x11FF), (0x1780, 0x17FF), (0x1950, 0x19FF), (0x1A20, 0x1AAF),
    (0x2E80, 0x2FDF), (0x3005, 0x3007), (0x3021, 0x3029), (0x3031, 0x3035), (0x3038, 0x303C), (0x3040, 0x31FF),
    (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xA960, 0xA97F), (0xA9E0, 0xA9FF), (0xAA60, 0xAA7F), (0xAC00, 0xD7FF),
    (0xF900, 0xFAFF), (0xFF66, 0xFF9F), (0x16FE0, 0x18D8F), (0x1B000, 0x1B2FF),
)
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_SCAN_END = 0x20000  # above: planes 2 and 3 are all Han (S), and no W character lies past them

# Pure ASCII: W is [a-z0-9] (the text is lowered) and there is no S character.
_ASCII = SimpleNamespace(
    word=re.compile(r"[a-z0-9]+"), word_char=re.compile(r"[a-z0-9]"), nospace=re.compile(r"[^\x00-\x7f]+"),
    atoms=re.compile(r"[a-z0-9]+"),
)


def _ranges(flags: bytearray, cp: int = 0) -> str:
    """A regex class body for the code points from ``cp`` on whose flag is set."""
    out = []
    while (cp := flags.find(1, cp)) >= 0:
        end = flags.find(0, cp)
        end = len(flags) if end < 0 else end
        out.append(re.escape(chr(cp)) + ("-" + re.escape(chr(end - 1)) if end - 1 > cp else ""))
        cp = end
    return "".join(out)


@cache
def _unicode() -> tuple[SimpleNamespace, SimpleNamespace]:
    """The W and S character classes for text within the BMP and for any text, built once from the Unicode
    database (tens of ms, at the first non-ASCII text)."""
    word, nospace, attach = bytearray(_SCAN_END), bytearray(_SCAN_END), bytearray(_SCAN_END)
    for a, b in _NOSPACE_BLOCKS:
        nospace[a : b + 1] = b"\x01" * (min(b, _SCAN_END - 1) - a + 1)
    attach[0x1160:0x1200] = b"\x01" * 0xA0  # Hangul vowel and final jamo
    attach[0xD7B0:0xD800] = b"\x01" * 0x50
    category, decomposition = unicodedata.category, unicodedata.decomposition
    for cp in range(_SCAN_END):
        ch = chr(cp)
        kind = category(ch)[0]
        if kind == "M" or (cp >= 0x300 and decomposition(ch) and _joins(unicodedata.normalize("NFKD", ch)[0])):
            attach[cp] = 1
        if kind in "LNM":
            if not nospace[cp]:
                word[cp] = 1
        else:
            nospace[cp] = 0
    # A class holding many characters outside the BMP is a slow scan for every character it misses, so
    # text within the BMP (nearly all) gets classes without them, and other text tries them after a one-range check.
    w, s = _ranges(word[:0x10000]), _ranges(nospace[:0x10000])
    w_full = f"(?:[{w}]+|(?=[\U00010000-\U0010ffff])[{_ranges(word, 0x10000)}])"
    s_full = f"[{s}{_ranges(nospace, 0x10000)}\U00020000-\U0003ffff]"
    bmp = SimpleNamespace(
        word=re.compile(f"[{w}]+"), word_char=re.compile(f"[{w}]"), nospace=re.compile(f"[{s}]+"),
        atoms=re.compile(f"[{w}]+|[{s}]"),
    )
    joins = f"(?:[{_ranges(attach[:0x10000])}]|(?=[\U00010000-\U0010ffff])[{_ranges(attach, 0x10000)}\U000e0100-\U000e01ef])"
    full = SimpleNamespace(
        word=re.compile(f"{w_full}+"), word_char=re.compile(w_full), nospace=re.compile(f"{s_full}+"),
        atoms=re.compile(f"{w_full}+|{s_full}"),
        # What normalizes on its own: a run of ASCII characters (each alone), or a character and what joins it.
        pieces=re.compile(f"[\\x00-\\x7f]+(?!{joins})|.{joins}*", re.S),
    )
    return bmp, full


def _joins(first: str) -> bool:
    """Whether a character whose decomposition starts with ``first`` may join the character before it."""
    return unicodedata.combining(first) != 0 or "\u1160" <= first <= "\u11ff" or "\ud7b0" <= first <= "\ud7ff"


def classes(text: str) -> SimpleNamespace:
    """The compiled character classes for ``text`` (normalized): ``word`` (runs of W), ``word_char``,
    ``nospace`` (runs of S), ``atoms`` (a run of W or one S character)."""
    if text.isascii():
        return _ASCII
    bmp, full = _unicode()
    return full if _ASTRAL.search(text) else bmp


def normalize(text: str) -> str:
    """The form text is compared in: NFKC, casefolded, accents removed, NUL a space."""
    if text.isascii():
        text = text.lower()
        return text.replace("\x00", " ") if "\x00" in text else text
    text = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    for old, new in _FOLD:  # after NFKC, which makes ŉ ʼn
        if old in text:
            text = text.replace(old, new)
    if _MAYBE_ACCENTED.search(text):
        split = unicodedata.normalize("NFD", text)
        if _ACCENTS.search(split):
            text = unicodedata.normalize("NFC", _ACCENTS.sub("", split))
    return text


def cut(term: str) -> str:
    """``term`` cut to its first :data:`MAX_TERM_BYTES` UTF-8 bytes, at a character boundary."""
    if len(term) <= MAX_TERM_BYTES // 4:
        return term
    raw = term.encode("utf-8", "surrogatepass")
    return term if len(raw) <= MAX_TERM_BYTES else raw[:MAX_TERM_BYTES].decode("utf-8", "ignore")


def chunk_term(chunk: str, cls: SimpleNamespace | None = None) -> str | None:
    """The term a whitespace-free piece of normalized text is besides its words, or None.

    Its ends stripped of :data:`STRIP`, it is a term when it holds a W
    character, a character that is not W, and no S character.
    """
    chunk = chunk.strip(STRIP)
    if not chunk:
        return None
    cls = cls or classes(chunk)
    if cls.word.fullmatch(chunk) or not cls.word.search(chunk) or cls.nospace.search(chunk):
        return None
    return chunk


def index_terms(text: str) -> set[str]:
    """Every term a post with this text (or topic) is found by.

    A term is a non-empty ``str`` of at most 64 UTF-8 bytes with no NUL.
    A query's lookups (:attr:`Query.lookups`) name only terms this can give.
    At most about two terms per character of the normalized text.
    """
    if len(text) > MAX_INDEXED_CHARS:
        text = text[:MAX_INDEXED_CHARS]
    return _terms(normalize(text)[:MAX_NORMALIZED_CHARS])


def _terms(norm: str, cls: SimpleNamespace | None = None) -> set[str]:
    """The terms of normalized text (``cls``: its classes, by default :func:`classes`)."""
    cls = cls or classes(norm)
    terms = set(cls.word.findall(norm))
    if len(norm) > MAX_TERM_BYTES // 4 and max(map(len, terms), default=0) > MAX_TERM_BYTES // 4:
        terms = {cut(t) for t in terms}
    if cls is not _ASCII:
        for run in cls.nospace.findall(norm):
            terms.update(run)
            terms.update(map(str.__add__, run, run[1:]))
    for chunk in norm.split():
        if not chunk.isalnum():  # letters and digits only: W or S, never a chunk term
            chunk = chunk.strip(STRIP)
            if chunk and not chunk.isalnum():  # chunk_term(chunk), sooner for ASCII
                if _ASCII.word.search(chunk) if chunk.isascii() else chunk_term(chunk, cls):
                    terms.add(cut(chunk))
    return terms


class Normalized:
    """A text's normalized form, its tokens, and the way back to the text's own indices.

    ``text``: :func:`normalize` of the original's first
    :data:`MAX_INDEXED_CHARS` characters, cut to :data:`MAX_NORMALIZED_CHARS`.
    :meth:`span` maps a span of ``text`` to the span of the original it came
    from (NFKC and casefolding change lengths: ``ß`` is ``ss``, ``ﬁ`` is ``fi``).
    """

    __slots__ = ("original", "text", "cls", "_full", "_starts", "_ends", "_chunks", "_atoms")

    def __init__(self, original: str) -> None:
        self.original = original[:MAX_INDEXED_CHARS]
        full = normalize(self.original)
        self.text = full[:MAX_NORMALIZED_CHARS]
        self.cls = classes(self.text)
        self._full = full
        self._starts = self._ends = None
        self._chunks = self._atoms = None

    def _align(self) -> None:
        """Normalize the original piece by piece (a character and what joins it); when the pieces
        join to the whole text's form, each normalized character maps to its piece, else (never seen) to the whole text."""
        full = self._full
        starts: list[int] = []
        ends: list[int] = []
        parts = []
        for m in _unicode()[1].pieces.finditer(self.original):
            a, b = m.span()
            part = normalize(m.group())
            parts.append(part)
            if m.group().isascii():  # one character each
                starts += range(a, b)
                ends += range(a + 1, b + 1)
            else:
                starts += [a] * len(part)
                ends += [b] * len(part)
        if "".join(parts) != full:
            starts, ends = [0] * len(full), [len(self.original)] * len(full)
        self._starts, self._ends = starts[: len(self.text)], ends[: len(self.text)]

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The span of the original text that ``text[start:end]`` comes from."""
        if self.original.isascii():
            return start, end
        if self._starts is None:
            self._align()
        return self._starts[start], self._ends[end - 1]

    def chunks(self) -> list[tuple[str, int, int]]:
        """``(chunk, start, end)``: the whitespace-separated chunks that are terms (:func:`chunk_term`)."""
        if self._chunks is None:
            found = []
            for m in re.finditer(r"\S+", self.text):
                raw = m.group()
                chunk = chunk_term(raw, self.cls)
                if chunk:
                    start = m.start() + len(raw) - len(raw.lstrip(STRIP))
                    found.append((chunk, start, start + len(chunk)))
            self._chunks = found
        return self._chunks

    def atoms(self) -> list[tuple[str, int, int]]:
        """``(atom, start, end)``: the words and the single S characters, in order."""
        if self._atoms is None:
            self._atoms = [(m.group(), m.start(), m.end()) for m in self.cls.atoms.finditer(self.text)]
        return self._atoms

    def word_end(self, i: int) -> int:
        """Where the run of W characters at ``i`` ends (``i`` itself when there is none)."""
        m = self.cls.word.match(self.text, i)
        return m.end() if m else i

    def is_word_char(self, i: int) -> bool:
        """Whether ``text[i]`` is a W character (False out of range)."""
        return 0 <= i < len(self.text) and self.cls.word_char.match(self.text, i) is not None
