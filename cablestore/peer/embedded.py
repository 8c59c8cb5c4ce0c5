"""A Cable peer inside an asyncio program: :class:`Peer`.

One object serves, connects, syncs, follows new posts and posts as its
user, over a :class:`cablestore.Store` the program opened::

    async with Peer(store, key=keypair) as peer:
        await peer.connect("127.0.0.1", 13331)        # follow a peer, live
        await peer.post_text("general", "hello")
        async for post in peer.posts("general"):      # StoredPost objects
            print(post.who, post.text)

It is built on what ``cablestore serve`` and ``cablestore sync`` run:
:meth:`Peer.serve` is :func:`cablestore.peer.transport.run_server` (a full
peer: it answers and pulls from whoever connects), :meth:`Peer.connect` is
:func:`cablestore.peer.transport.run_sync` with ``live=True`` and
:meth:`Peer.sync` the same without, each in a task the peer owns, never
touching the program's signal handlers.  :meth:`Peer.posts` is a
:class:`cablestore.peer.postfeed.PostFeed` (bounded, see there for the
back-pressure policy).  Posting goes through
:class:`cablestore.authoring.author.Author`, in a worker thread so the
event loop keeps running while the store writes.

Lifecycle: leaving ``async with`` (or :meth:`Peer.aclose`) stops every
listener and connection, awaits every task the peer started and ends every
feed; the store stays open (the program owns it).  Errors are
:class:`cablestore.errors.CableError` subclasses.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from cablestore.errors import ArgumentError, PeerClosedError
from cablestore.peer.dialer import run_dialer
from cablestore.peer.limits import DEFAULT_POLICY, FEED_BUFFER, PeerLimits
from cablestore.peer.postfeed import PostFeed
from cablestore.peer.secure import PrivateCabal, require_cabal_key
from cablestore.peer.sockets import dial
from cablestore.peer.transport import run_server, run_sync
from cablestore.store.store import Store
from cablestore.wire.crypto import Keypair


class LiveSync:
    """A live sync with one remote peer, as :meth:`Peer.connect` returns it.

    It runs until the remote closes or fails the sync, :meth:`close`, or the
    peer closes; :meth:`wait` and :meth:`close` return the sync's summary
    (:meth:`cablestore.peer.sync.Sync.summary`: ``posts_ingested``,
    ``complete``, ``reason`` ...).
    """

    def __init__(self, address: str, task: asyncio.Task, stop: asyncio.Event) -> None:
        self.address = address
        self._task = task
        self._stop = stop

    @property
    def running(self) -> bool:
        """True until the sync ended."""
        return not self._task.done()

    async def wait(self) -> dict:
        """Wait until the sync ends on its own (the remote closed, or failed it); its summary."""
        return await asyncio.shield(self._task)

    async def close(self) -> dict:
        """End the sync and close its connection; its summary."""
        self._stop.set()
        return await asyncio.shield(self._task)


class Peer:
    """A Cable peer over ``store`` for an asyncio program; use it as ``async with Peer(store, ...) as peer``.

    ``key``: the :class:`cablestore.Keypair` the peer posts as (from
    :func:`cablestore.authoring.keyfile.read_keyfile`); None: a peer that
    only reads (posting raises :class:`cablestore.errors.ArgumentError`).
    ``cabal``: a :class:`cablestore.peer.secure.PrivateCabal` for a private
    cabal: every listener and connection goes through the Cable Handshake
    with its key, and the store is tied to that cabal on entering (another
    cabal's store: :class:`cablestore.errors.CabalMismatchError`); without
    ``cabal``, a store bound to a private cabal is neither served nor synced
    (:class:`cablestore.errors.CabalKeyRequiredError`).  ``limits``: the
    resource limits against remote peers (:class:`cablestore.peer.limits.PeerLimits`).
    """

    def __init__(self, store: Store, *, key: Keypair | None = None, cabal: PrivateCabal | None = None, limits: PeerLimits = DEFAULT_POLICY) -> None:
        if not isinstance(store, Store):
            raise ArgumentError(f"Peer needs an open Store, not {type(store).__name__} (open one with Store(path))")
        if key is not None and not isinstance(key, Keypair):
            raise ArgumentError(f"key must be a Keypair (read a key file with read_keyfile(path)), not {type(key).__name__}")
        if cabal is not None and not isinstance(cabal, PrivateCabal):
            raise ArgumentError(f"cabal must be a PrivateCabal(cabal_key, keypair), not {type(cabal).__name__}")
        if not isinstance(limits, PeerLimits):
            raise ArgumentError(f"limits must be a PeerLimits, not {type(limits).__name__}")
        self.store = store
        self.key = key
        self.cabal = cabal
        self.limits = limits
        self._state = "new"  # new, open, closed
        self._tasks: dict[asyncio.Task, asyncio.Event] = {}
        self._feeds: weakref.WeakSet[PostFeed] = weakref.WeakSet()
        self._author = None

    # --- lifecycle ----------------------------------------------------------------------
    async def __aenter__(self) -> Peer:
        if self._state != "new":
            raise PeerClosedError("a Peer is entered once: make a new one")
        if self.cabal is not None:
            self.store.join_cabal(self.cabal.cabal_key)  # another cabal's store: CabalMismatchError, before any socket
        self._state = "open"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop every listener and connection, await every task this peer started, end every feed; the store stays open.

        Calling it again does nothing.
        """
        self._state = "closed"
        for stop in self._tasks.values():
            stop.set()
        tasks = list(self._tasks)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        for feed in list(self._feeds):
            await feed.aclose()

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` ran."""
        return self._state == "closed"

    def _check_open(self) -> None:
        if self._state != "open":
            raise PeerClosedError("use the Peer inside `async with Peer(store, ...) as peer:`" if self._state == "new" else "this Peer is closed")

    def _private(self, *, initiator: bool) -> dict:
        if self.cabal is None:
            return {}
        out = {"cabal_key": self.cabal.cabal_key, "keypair": self.cabal.keypair}
        if initiator:
            out["prologue"] = self.cabal.prologue
        return out

    def _ended(self, task: asyncio.Task) -> None:
        """A task of this peer ended: forget it; its failure stays for whoever awaits it (``LiveSync.wait``), unlogged."""
        self._tasks.pop(task, None)
        if not task.cancelled():
            task.exception()

    async def _start(self, run: Callable[[asyncio.Event], Coroutine[Any, Any, dict]], started: asyncio.Future | None = None) -> tuple[asyncio.Task, asyncio.Event]:
        """Run ``run(stop)`` in a task this peer owns (``stop`` ends it); with ``started``, wait for that (or for the task failing first)."""
        stop = asyncio.Event()
        task = asyncio.create_task(run(stop))
        self._tasks[task] = stop
        task.add_done_callback(self._ended)
        if started is None:
            return task, stop
        try:
            await asyncio.wait([task, started], return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # cancelled while starting: stop what was started
            stop.set()
            await asyncio.gather(task, return_exceptions=True)
            raise
        if not started.done():
            task.result()  # raises the failure (a TransportError when the address cannot be bound)
            raise PeerClosedError("this Peer closed before it was ready")
        return task, stop

    # --- the network --------------------------------------------------------------------
    async def serve(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        """Listen for peers on ``host:port`` (port 0: any free one); return the address bound.

        A full peer, as ``cablestore serve``: it answers every peer that
        connects and pulls from it (its channels and ours, then live), so
        what they write is stored and reaches :meth:`posts`.  Failing to
        bind raises :class:`cablestore.errors.TransportError`.  Call it
        again for more listeners; all stop when the peer closes.
        """
        self._check_open()
        bound = asyncio.get_running_loop().create_future()

        def ready(h: str, p: int) -> None:
            if not bound.done():
                bound.set_result((h, p))

        await self._start(
            lambda stop: run_server(self.store, _address(host, port), ready=ready, stop=stop, policy=self.limits, signals=False, **self._private(initiator=False)),
            bound,
        )
        return bound.result()

    async def connect(self, host: str, port: int, *, reconnect: bool = False) -> LiveSync:
        """Connect to the peer at ``host:port`` and sync from it, live: its history, then what it stores later.

        Returns once the connection is made (refused: :class:`cablestore.errors.TransportError`);
        the sync runs in the background until the remote closes it, :meth:`LiveSync.close` or :meth:`aclose`.
        What it brings reaches :meth:`posts`; the remote peer (a ``cablestore
        serve`` pulls back) gets what this peer holds and posts.

        ``reconnect=True``: keep the connection instead, two-way (this peer
        answers the remote's requests too), dialling again by itself with
        backoff and jitter when it drops or the remote is down
        (:mod:`cablestore.peer.dialing`), from the cursors it kept; returns at
        once, even while the remote is unreachable, and runs until
        :meth:`LiveSync.close` or :meth:`aclose` (its summary: the node's counts,
        ``dials``, ``dialled``, ``dials_failed`` among them).
        """
        self._check_open()
        if self.cabal is None:
            require_cabal_key(self.store, "sync")  # before the socket: a private cabal's store is never offered plain
        address = _address(host, port)
        if reconnect:
            task, stop = await self._start(
                lambda stop: run_dialer(self.store, address, stop=stop, policy=self.limits, **self._private(initiator=True))
            )
            return LiveSync(address, task, stop)
        link = await dial(host, port)
        if self._state != "open":  # closed while dialling
            link.transport.abort()
            raise PeerClosedError("this Peer is closed")
        task, stop = await self._start(
            lambda stop: run_sync(self.store, address, link=link, live=True, stop=stop, policy=self.limits, signals=False, **self._private(initiator=True))
        )
        return LiveSync(address, task, stop)

    async def sync(self, host: str, port: int, *, channels: Iterable[str] | None = None, timeout: float = 600.0) -> dict:
        """Pull what the peer at ``host:port`` has and the store lacks, once; return the summary.

        ``channels``: those (None: every channel it lists).  The summary is
        ``cablestore sync --json``'s: ``complete`` is False with a ``reason``
        when the peer failed the sync or ``timeout`` seconds passed.
        Cancelling the call closes the connection.
        """
        self._check_open()
        address = _address(host, port)
        task, stop = await self._start(
            lambda stop: run_sync(self.store, address, channels=channels, timeout=timeout, stop=stop, policy=self.limits, signals=False, **self._private(initiator=True))
        )
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            stop.set()
            await asyncio.gather(task, return_exceptions=True)
            raise

    # --- new posts ----------------------------------------------------------------------
    def posts(self, channel: str | None = None, *, buffer: int = FEED_BUFFER) -> PostFeed:
        """New posts as the store commits them, from any peer or posted through this one: ``async for post in peer.posts():``.

        Each is a :class:`cablestore.store.read.decoded.StoredPost` (``hash``,
        ``author``, ``who``, ``post_type``, ``type_name``, ``channel``,
        ``text``, ``timestamp``, ``hidden_by``, ...), in the order the store
        committed them.  ``channel``: only that channel's posts; None: every
        post.  The feed starts now (posts committed before this call are in
        the store).  ``buffer``: posts kept for a reader that is behind;
        beyond it the feed raises :class:`cablestore.errors.FellBehindError`
        (see :mod:`cablestore.peer.postfeed`).  Closing the peer ends every feed.
        """
        self._check_open()
        feed = PostFeed(self.store, channel, buffer=buffer)
        self._feeds.add(feed)
        return feed

    # --- posting as the peer's user ----------------------------------------------------------
    async def _post(self, method: str, *args: Any) -> bytes:
        self._check_open()
        if self.key is None:
            raise ArgumentError("this Peer has no key to post with: give Peer(store, key=read_keyfile(path))")
        if self._author is None:
            from cablestore.authoring.author import Author  # see docs/architecture.md, "Deferred imports"

            self._author = Author(self.store, self.key)
        return await asyncio.to_thread(getattr(self._author, method), *args)

    async def post_text(self, channel: str, text: str) -> bytes:
        """Post ``text`` to ``channel`` (linked to its heads); return the post's hash."""
        return await self._post("text", channel, text)

    async def join(self, channel: str) -> bytes:
        """Join ``channel``; return the post's hash."""
        return await self._post("join", channel)

    async def leave(self, channel: str) -> bytes:
        """Leave ``channel``; return the post's hash."""
        return await self._post("leave", channel)

    async def set_topic(self, channel: str, topic: str) -> bytes:
        """Set (``""``: clear) the topic of ``channel``; return the post's hash."""
        return await self._post("topic", channel, topic)

    async def set_name(self, name: str) -> bytes:
        """Set this user's name (a post/info keeping its other properties); return the post's hash."""
        return await self._post("name", name)

    async def delete(self, *hashes: bytes | str) -> bytes:
        """Delete posts of this user (hashes as bytes or hex); return the post/delete's hash."""
        return await self._post("delete", *hashes)


def _address(host: str, port: int) -> str:
    """``host:port`` as :func:`cablestore.peer.sockets.parse_address` reads it (an IPv6 host in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
