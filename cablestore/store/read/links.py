"""Read-side of the ``!links`` view: links, reverse links and channel heads.

A client sorts posts causally (spec 5.1.3) with :meth:`LinkQueries.links`
and :meth:`LinkQueries.reverse_links`; an author links a new post to
:meth:`LinkQueries.heads` (spec 5.1.2.1).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cablestore.errors import QueryError
from cablestore.keyspace.keys import POSTS, HashLike, as_hash
from cablestore.store.handle import Component
from cablestore.views import links as view
from cablestore.wire.codec import decode_post


class LinkQueries(Component):
    """Links between posts: what a post links to, what links to it, a channel's heads."""

    def links(self, h: HashLike) -> list[bytes]:
        """The hashes the stored post ``h`` links to, in its order; [] when it is not stored."""
        blob = self.db.get(POSTS + as_hash(h))
        return list(decode_post(blob).links) if blob is not None else []

    def reverse_links(self, h: HashLike) -> list[bytes]:
        """Hashes of the stored posts that link to ``h`` (stored or not), ascending."""
        prefix = view.linkers_prefix(as_hash(h))
        return [k[-32:] for k in self.db.iterator(prefix=prefix, include_value=False)]

    def heads(self, channel: str) -> list[bytes]:
        """The channel's heads (spec 5.1.2.1): linkable posts no stored post links to, by hash."""
        if not isinstance(channel, str):
            raise QueryError(f"channel must be a string, got {type(channel).__name__}")
        prefix = view.heads_prefix(channel)
        return [k[len(prefix) :] for k in self.db.iterator(prefix=prefix, include_value=False)]


def causal_sort(store: Any, hashes: Iterable[HashLike]) -> list[bytes]:
    """Sort stored posts as spec 5.1.3 does: after every post they link to, else by timestamp, then hash.

    A topological sort over the links among ``hashes`` (found with
    ``links`` and ``reverse_links``) that always takes the ready post with the
    lowest ``(timestamp, hash)``.  Chains through posts outside ``hashes`` are
    not seen.  Unknown hashes are left out.
    """
    import heapq

    posts = {}
    for h in dict.fromkeys(as_hash(x) for x in hashes):
        blob = store.get(h)
        if blob is not None:
            posts[h] = decode_post(blob).timestamp
    waiting = {h: len({p for p in store.links(h) if p in posts}) for h in posts}
    ready = [(ts, h) for h, ts in posts.items() if not waiting[h]]
    heapq.heapify(ready)
    out = []
    while ready:
        _, h = heapq.heappop(ready)
        out.append(h)
        for child in store.reverse_links(h):
            if child in waiting:
                waiting[child] -= 1
                if not waiting[child]:
                    heapq.heappush(ready, (posts[child], child))
    return out
