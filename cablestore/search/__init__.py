"""Full-text search, the pure part: how text is normalized and cut into index
terms (:mod:`cablestore.search.text`) and the query language
(:mod:`cablestore.search.query`).  Nothing here touches the store: the view
(``views/search.py``) writes the terms, the store (``store/searching.py``)
looks them up, and both call only what this package defines.
"""

from .query import SYNTAX, Lookup, Query, parse
from .text import index_terms, normalize

__all__ = ["SYNTAX", "Lookup", "Query", "index_terms", "normalize", "parse"]
