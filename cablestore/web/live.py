"""Live pages: the post/texts a served store commits, pushed to the channel pages open in browsers.

:class:`LiveFeed` subscribes to the store's commits (``Store.subscribe``: its
callback runs in the writing thread) and hands each new post/text's hash to
the web server's event loop, where every page watching that channel has a
bounded queue.  A page that does not keep up loses its queue (the browser's
EventSource reconnects and the page can be reloaded); a writer never waits.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from cablestore.keyspace.keys import canonical_channel
from cablestore.store.events import Committed
from cablestore.wire.codec import TEXT

if TYPE_CHECKING:
    from cablestore.store.store import Store

QUEUE = 256  # new posts waiting for one page; more and the page is dropped


class LiveFeed:
    """The channels' new post/texts, from the store's commits to the pages watching them, on ``loop``."""

    def __init__(self, store: Store, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._watching: dict[str, set[asyncio.Queue]] = {}
        self._unsubscribe = store.subscribe(self._on_commit)

    def close(self) -> None:
        """Stop listening to the store and end every page's stream."""
        self._unsubscribe()
        for queues in self._watching.values():
            for queue in queues:
                with contextlib.suppress(asyncio.QueueFull):
                    queue.put_nowait(None)
        self._watching.clear()

    def _on_commit(self, change: Committed) -> None:
        """In the writing thread: pass the new post/texts' (channel, hash) to the loop."""
        new = [(canonical_channel(post.channel), h) for h, post in change.added if post.post_type == TEXT]
        if new and not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: no page to tell
                self.loop.call_soon_threadsafe(self._dispatch, new)

    def _dispatch(self, new: list[tuple[str, bytes]]) -> None:
        for channel, h in new:
            for queue in list(self._watching.get(channel, ())):
                try:
                    queue.put_nowait(h)
                except asyncio.QueueFull:  # a page that does not read: its stream ends
                    self._watching[channel].discard(queue)
                    while not queue.empty():
                        queue.get_nowait()
                    queue.put_nowait(None)

    def watch(self, channel: str) -> asyncio.Queue:
        """A queue of the hashes of ``channel``'s new post/texts (None: the stream ends); call :meth:`unwatch` after."""
        queue: asyncio.Queue = asyncio.Queue(QUEUE)
        self._watching.setdefault(canonical_channel(channel), set()).add(queue)
        return queue

    def unwatch(self, channel: str, queue: asyncio.Queue) -> None:
        """Stop sending ``channel``'s new posts to ``queue``."""
        self._watching.get(canonical_channel(channel), set()).discard(queue)
