"""Text normalization and index terms (STUB: the interface the view and the
store build on; the real rules replace the bodies, not the signatures).
"""

from __future__ import annotations


def normalize(text: str) -> str:
    """The form text is compared in: NFKC, casefolded, accents removed."""
    return text.casefold()


def index_terms(text: str) -> set[str]:
    """Every term a post with this text (or topic) is found by.

    A term is a non-empty ``str`` of at most 64 UTF-8 bytes with no NUL.
    A query's lookups (:attr:`Query.lookups`) name only terms this can give.
    """
    return {w for w in normalize(text).split() if w}
