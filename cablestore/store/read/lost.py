"""Posts ``recover`` found gone: what the surviving rows knew of each, kept until the post comes back.

``recover`` names every post the store held once and lost (its bytes were
in a damaged block) with what the surviving ``!author!`` keys and views
knew of it: author, their name, channel, time and type.  They are kept
under ``!local!lost!<hash>`` so a later ``recover`` or ``check`` lists them
again; a post that a sync brings back is listed no more (it is read as
held), and its row is dropped by the next :meth:`LostPosts.remember_lost`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgpack

from cablestore.keyspace.keys import LOST, POSTS
from cablestore.store.handle import Component, Handle
from cablestore.store.write.writer import Writer

FIELDS = ("hash", "author", "name", "channel", "timestamp", "type", "run")


class LostPosts(Component):
    """The lost-posts record of one store (written through ``writer``)."""

    def __init__(self, handle: Handle, writer: Writer) -> None:
        super().__init__(handle)
        self._writer = writer

    def lost_posts(self) -> list[dict[str, Any]]:
        """Posts ``recover`` found gone that the store still does not hold, oldest first: ``hash``, ``author`` (hex),
        ``name``, ``channel``, ``timestamp`` (ms), ``type`` (a post type's name), ``run`` (its ``lost/`` folder); None where unknown."""
        out = []
        with self.db.snapshot() as snap:
            for key, value in snap.iterator(prefix=LOST):
                if snap.get(POSTS + key[len(LOST) :]) is not None:
                    continue  # back: a sync brought it
                try:
                    row = msgpack.unpackb(value)
                except (ValueError, msgpack.UnpackException):
                    row = {}
                row = row if isinstance(row, dict) else {}
                out.append({f: row.get(f) for f in FIELDS} | {"hash": key[len(LOST) :].hex()})
        return sorted(out, key=lambda r: (r["timestamp"] is None, r["timestamp"] or 0, r["hash"]))

    def remember_lost(self, posts: Iterable[dict[str, Any]]) -> int:
        """Keep ``posts`` (dicts with ``hash`` in hex and the other :data:`FIELDS`) as lost, and drop the rows of posts held again; returns how many are kept."""
        rows = {bytes.fromhex(p["hash"]): msgpack.packb({f: p.get(f) for f in FIELDS}) for p in posts}
        with self._writer.batch() as batch:
            kept = set()
            for key, _ in batch.current(LOST):
                if batch.get(POSTS + key[len(LOST) :]) is None:
                    kept.add(key)
                else:
                    batch.delete(key)  # the post is held again
            for h, value in rows.items():
                if batch.get(POSTS + h) is None:
                    batch.put(LOST + h, value)
                    kept.add(LOST + h)
        return len(kept)
