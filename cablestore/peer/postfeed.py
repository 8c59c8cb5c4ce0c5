"""New posts as an asyncio stream: :class:`PostFeed`, what ``Peer.posts()`` returns.

A feed subscribes to its store's commits (:meth:`cablestore.Store.subscribe`,
called in whichever thread wrote) and hands the posts each commit added to
one asyncio reader, in the order the store reported them, as
:class:`cablestore.store.read.decoded.StoredPost` objects.

Back-pressure: a feed holds at most ``buffer`` posts.  The writer never
waits for a reader and never allocates past that bound: once a reader lets
its buffer fill, every later post is counted, not kept (so no post is
skipped silently and later ones delivered out of order), and after handing
over the posts it holds, the feed raises :class:`cablestore.errors.FellBehindError`
saying how many it did not keep.  The store holds them all: read them with
:meth:`cablestore.Store.messages` or :meth:`cablestore.Store.posts`, then open a new feed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from cablestore.errors import ArgumentError, FellBehindError
from cablestore.keyspace.keys import canonical_channel
from cablestore.peer.limits import FEED_BUFFER
from cablestore.store.read.decoded import StoredPost
from cablestore.wire.codec import Post, encode_post

if TYPE_CHECKING:
    from cablestore.store.events import Committed
    from cablestore.store.store import Store


def _deliver(ref: weakref.ref, change: Committed) -> None:
    """The store's callback: hand ``change`` to the feed, if it is still alive (runs in the writing thread)."""
    feed = ref()
    if feed is not None:
        feed._offer(change)


class PostFeed:
    """An async iterator of the posts the store commits from now on, bounded to ``buffer`` posts.

    ``channel``: only posts naming that channel (case-insensitively: text,
    topic, join, leave, and moderation posts in that context); None: every
    post, post/info and post/delete included.  Use it with ``async for``;
    ``await feed.aclose()`` (or ``async with``) stops it at once, and a feed
    dropped unclosed unsubscribes when it is garbage collected.
    """

    def __init__(self, store: Store, channel: str | None = None, *, buffer: int = FEED_BUFFER) -> None:
        if isinstance(buffer, bool) or not isinstance(buffer, int) or buffer < 1:
            raise ArgumentError(f"buffer must be a positive number of posts, got {buffer!r}")
        if channel is not None and not isinstance(channel, str):
            raise ArgumentError(f"channel must be a string or None, not {type(channel).__name__}")
        self.store = store
        self.channel = channel
        self.buffer = buffer
        self._wanted = None if channel is None else canonical_channel(channel)
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            raise ArgumentError("a PostFeed is read in the event loop it is made in: make it inside a coroutine") from None
        self._lock = threading.Lock()
        self._items: deque = deque()
        self._missed = 0
        self._closed = False
        self._waking = False  # a wake-up is scheduled on the loop: at most one at a time
        self._ready = asyncio.Event()
        unsubscribe = store.subscribe(_callback(weakref.ref(self)))
        self._finalizer = weakref.finalize(self, unsubscribe)

    @property
    def missed(self) -> int:
        """Posts not kept since the buffer filled (0 while the reader keeps up)."""
        return self._missed

    def __len__(self) -> int:
        """Posts waiting to be read."""
        return len(self._items)

    # --- the writer's side (any thread) -----------------------------------------------
    def _offer(self, change: Committed) -> None:
        with self._lock:
            if self._closed:
                return
            for h, post in change.added:
                if self._wanted is not None and (post.channel is None or canonical_channel(post.channel) != self._wanted):
                    continue
                if self._missed or len(self._items) >= self.buffer:
                    self._missed += 1
                else:
                    self._items.append((h, post))
            if self._waking or not (self._items or self._missed):
                return
            self._waking = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is reading
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        with self._lock:
            self._waking = False
        self._ready.set()

    # --- the reader's side (the event loop) ---------------------------------------------
    def __aiter__(self) -> PostFeed:
        return self

    async def __anext__(self) -> StoredPost:
        while True:
            with self._lock:
                item = self._items.popleft() if self._items else None
                missed, closed = self._missed, self._closed
                if item is None and not closed and not missed:
                    self._ready.clear()
            if item is not None:
                return self._decoded(*item)
            if closed:
                raise StopAsyncIteration
            if missed:
                self._close()
                raise FellBehindError(
                    f"this reader of new posts fell {self.buffer} posts behind and {missed} later posts were not queued: "
                    "read them from the store (Store.messages, Store.posts) and open a new feed"
                )
            await self._ready.wait()

    def _decoded(self, h: bytes, post: Post) -> StoredPost:
        """The post as the store reads it now (its author's name, whether it is hidden), or as committed if it is gone since."""
        found = self.store.post(h)
        return found if found is not None else StoredPost.from_bytes(encode_post(post), h, post=post)

    def _close(self) -> None:
        with self._lock:
            self._closed = True
            self._items.clear()
        self._finalizer()  # unsubscribe from the store (once)
        self._ready.set()

    async def aclose(self) -> None:
        """Stop: unsubscribe, drop what is queued; a reader waiting in ``async for`` ends its loop."""
        self._close()

    async def __aenter__(self) -> PostFeed:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


def _callback(ref: weakref.ref) -> Callable[[Committed], None]:
    """A store callback that holds the feed weakly, so a feed nobody reads can be collected."""
    return lambda change: _deliver(ref, change)
