"""Read-side of the ``!links`` view: links, reverse links and channel heads.

A client sorts posts causally (spec 5.1.3) with :meth:`LinkQueries.links`
and :meth:`LinkQueries.reverse_links`; an author links a new post to
:meth:`LinkQueries.heads` (spec 5.1.2.1).
"""

from __future__ import annotations

from cablestore.views import links as view

from .codec import decode_post
from .errors import QueryError
from .keys import as_hash
from .txn import POSTS


class LinkQueries:
    """Mixed into Store (through Queries); expects ``self.db`` (a plyvel DB)."""

    def links(self, h) -> list[bytes]:
        """The hashes the stored post ``h`` links to, in its order; [] when it is not stored."""
        blob = self.db.get(POSTS + as_hash(h))
        return list(decode_post(blob).links) if blob is not None else []

    def reverse_links(self, h) -> list[bytes]:
        """Hashes of the stored posts that link to ``h`` (stored or not), oldest first."""
        prefix = view.linkers_prefix(as_hash(h))
        return [k[-32:] for k in self.db.iterator(prefix=prefix, include_value=False)]

    def heads(self, channel: str) -> list[bytes]:
        """The channel's heads (spec 5.1.2.1): linkable posts no stored post links to, by hash."""
        if not isinstance(channel, str):
            raise QueryError(f"channel must be a string, got {type(channel).__name__}")
        prefix = view.heads_prefix(channel)
        return [k[len(prefix) :] for k in self.db.iterator(prefix=prefix, include_value=False)]
