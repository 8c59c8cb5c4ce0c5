"""asyncio TCP for :mod:`cablestore.peer`: Cable messages back to back on a socket.

:class:`PeerServer` listens and keeps one :class:`cablestore.peer.protocol.Connection`
per accepted socket; :meth:`PeerServer.dial` dials out.  All share one
:class:`cablestore.peer.Node`, so requests are forwarded between
its connections and live pushes reach every socket.  :func:`run_server`
and :func:`sync_path` are what ``cablestore serve`` / ``cablestore sync`` run.

The transport follows the node's resource policy
(:class:`cablestore.peer.limits.PeerLimits`): each socket is read into a
buffer only as far as :meth:`cablestore.peer.protocol.Connection.read_allowance`
allows (``asyncio.BufferedProtocol``), and paused otherwise; output is
handed to a socket only while its write buffer is below 64 KiB; the node's
work runs in slices of about 5 ms between reads (round robin over the
connections), and only the connections that have bytes to write are
visited.  Nothing is done per event for every connection.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cablestore.errors import ArgumentError, CableError, HandshakeRequiredError, NotHandshakeError, TransportError, WrongCabalKeyError
from cablestore.peer.cabals import run_cabals
from cablestore.peer.dialer import keep_dialing
from cablestore.peer.limits import BACKLOG, DEFAULT_POLICY, DEFAULT_PROGRESS_TIMEOUT, STORE_CACHE_MB, PeerLimits
from cablestore.peer.node import Node
from cablestore.peer.protocol import Connection
from cablestore.peer.pulling import Puller
from cablestore.peer.secure import PrivateCabal, identify, require_cabal_key
from cablestore.peer.sockets import Wire, _Link, _on_signals, attach_dialled, dial, now_ms, parse_address
from cablestore.peer.sync import Sync
from cablestore.wire.crypto import Keypair
from cablestore.wire.handshake import CABLE_PROLOGUE

if TYPE_CHECKING:
    from cablestore.progress import Progress
    from cablestore.store.store import Store

class PeerServer:
    """Accepts Cable peers on ``host:port`` (port 0: any free port, see ``.port``).

    ``private``: a :class:`cablestore.peer.secure.PrivateCabal`: every
    connection of this listener must pass the Cable Handshake with its cabal
    key first (a plain client, or one with another key, gets nothing and is
    closed), then speaks draft8's framing.  :meth:`listen` adds more
    listeners to the same node (a plain one beside a private one, say).
    """

    def __init__(self, node: Node, host: str, port: int, *, private: PrivateCabal | None = None):
        self.node, self.host, self.port = node, host, port
        self.private = private
        self.wire: Wire | None = None
        self._servers: list = []
        self.listeners: list[tuple[str, int, bool]] = []  # (host, port, private)

    async def start(self) -> PeerServer:
        """Listen; raises :class:`TransportError` if the address cannot be bound."""
        self.wire = Wire(self.node)
        self.wire.on_open = identify
        try:
            self.port = await self.listen(self.host, self.port, private=self.private)
        except TransportError:
            await self.wire.close()
            raise
        return self

    async def listen(self, host: str, port: int, *, private: PrivateCabal | None = None) -> int:
        """Listen on one more address (private with ``private``); return its port."""
        loop = asyncio.get_running_loop()
        try:
            server = await loop.create_server(lambda: _Link(self.wire, accept=True, private=private), host, port, backlog=BACKLOG)
        except (OSError, OverflowError, ValueError) as exc:
            raise TransportError(f"cannot listen on {host}:{port}: {exc}") from exc
        self._servers.append(server)
        bound = server.sockets[0].getsockname()[1]
        self.listeners.append((host, bound, private is not None))
        return bound

    async def dial(self, host: str, port: int, name: str | None = None, *, private: PrivateCabal | None = None) -> Connection:
        """Connect this node to another peer too (its requests get forwarded there); ``private``: over the handshake."""
        link = await dial(host, port)
        return attach_dialled(self.wire, link, name or f"{host}:{port}", private)

    async def close(self) -> None:
        """Stop listening and drop every connection."""
        for server in self._servers:
            server.close()
        await self.wire.close()
        for server in self._servers:
            await server.wait_closed()




async def sync_path(path: str | os.PathLike, address: str, **kw: Any) -> dict:
    """:func:`run_sync` into the store at ``path``, created if missing, once ``address`` has answered.

    ``local_user=``: the store's local user (see :class:`cablestore.Store`).

    The connection is made first, so a peer that cannot be reached (or a bad
    address) leaves no new, empty store behind.
    """
    from cablestore.store.store import Store

    local_user = kw.pop("local_user", None)
    link = await dial(*parse_address(address))
    created = not Path(path).exists()
    try:
        store = Store(path, local_user=local_user, cache_mb=STORE_CACHE_MB)  # within the peer's memory budget
        if kw.get("cabal_key") is not None:
            try:
                store.join_cabal(bytes(kw["cabal_key"]))  # another cabal's store: refused before any byte is sent
            except BaseException:
                store.close()
                if created:
                    shutil.rmtree(path, ignore_errors=True)
                raise
    except BaseException:
        link.transport.abort()
        raise
    failure, summary = None, {}
    with store:
        try:
            summary = await run_sync(store, address, link=link, **kw)
        except CableError as exc:  # a handshake that says what is wrong, a store of a private cabal: raised below
            failure = exc
        empty = created and not summary.get("complete") and not store.has_posts()
    if empty:  # a sync that failed into a store it made and wrote no post to leaves nothing behind
        shutil.rmtree(path, ignore_errors=True)
    if failure is not None:
        raise failure
    return summary



def handshake_failure(conn: Connection, private: PrivateCabal | None, complete: bool, ended_by_close: bool = True) -> CableError | None:
    """What a sync that ended in the handshake (or, plain, closed before any answer) raises: the cause in words, else None."""
    if private is not None:
        if conn.authenticated:
            return None
        return conn.error if isinstance(conn.error, (NotHandshakeError, WrongCabalKeyError)) else None
    if complete or conn.stats["received"] or conn.close_reason not in ("closed", "lost") or not ended_by_close:
        return None  # an answer came, or this side gave up first (no progress, a malformed answer): not the peer refusing plain Cable
    return HandshakeRequiredError(
        "the peer closed the connection before any Cable answer: it may require a cabal key (cabal_key=), or be over a limit (its log says which)"
    )


async def run_server(
    store: Store,
    address: str,
    *,
    ready: Callable[[str, int], None] | None = None,
    stop: asyncio.Event | None = None,
    policy: PeerLimits = DEFAULT_POLICY,
    pull: bool = True,
    cabal_key: bytes | None = None,
    keypair: Keypair | None = None,
    plain_listen: str | None = None,
    signals: bool = True,
    on_node: Callable[[Node], None] | None = None,
    peers: Iterable[str] = (),
    cabals: Iterable[tuple[Store, bytes]] | None = None,
) -> dict:
    """Serve ``store`` until ``stop`` is set or SIGINT/SIGTERM; return the address and the node's counts.

    ``pull``: also sync from every peer that connects (:class:`cablestore.peer.pulling.Puller`):
    its channels and ours, the moderation state, then live, so what it writes reaches the store
    and the other peers' live requests.  False: only answer.

    ``cabal_key``: ``address`` is a private listener: every connection must
    pass the Cable Handshake with this key (see :mod:`cablestore.peer.secure`);
    ``keypair``: the static key's Ed25519 keypair (None: a fresh one for the
    run).  The store is tied to the cabal first (``Store.join_cabal``:
    another cabal's store raises :class:`cablestore.errors.CabalMismatchError`
    before any socket is opened).  ``plain_listen``: also a plain listener
    (legacy TCP, deployed framing) on that address, serving the same store to
    anyone who reaches it.  ``ready(host, port)`` is called for each listener,
    the private one first.  ``signals``: SIGINT and SIGTERM set ``stop``
    (False in a program that owns its signals: :class:`cablestore.peer.embedded.Peer`).
    ``on_node(node)`` is called with the serving :class:`Node` before any
    listener opens (``cablestore web`` shows its peers).  ``peers``: addresses
    (``HOST:PORT``) of peers to keep a connection to (:func:`keep_dialing`:
    pulled from and answered, live, reconnected with backoff; private with
    ``cabal_key``), whatever ``pull`` says of the peers that connect.

    A store bound to a private cabal is never served without its key:
    :class:`cablestore.errors.CabalKeyRequiredError` before any socket.
    ``cabals``: (store, cabal key) pairs served on the one private listener
    ``address`` (``store`` is then None): each connection gets the store of
    the key its message 1 authenticates under (:mod:`cablestore.peer.cabals`);
    ``on_node`` is then called with each cabal's node.
    """
    if cabals is not None:
        if store is not None or cabal_key is not None or plain_listen is not None or peers:
            raise ArgumentError("cabals= serves several stores on one private listener: give no store, cabal_key, plain_listen or peers with it")
        return await run_cabals(cabals, address, ready=ready, stop=stop, policy=policy, pull=pull, keypair=keypair, signals=signals, on_node=on_node)
    peers = [str(p) for p in peers]
    for p in peers:
        parse_address(p)  # a bad address is the caller's error, before anything opens
    host, port = parse_address(address, listening=True)
    private = None
    if cabal_key is not None:
        private = PrivateCabal(bytes(cabal_key), keypair)
        store.join_cabal(private.cabal_key)
    elif plain_listen is not None:
        raise ArgumentError("plain_listen is the plain listener beside a private one: give cabal_key too")
    else:
        require_cabal_key(store, "serve")
    plain = parse_address(plain_listen, listening=True) if plain_listen is not None else None
    node = Node(store, policy=policy)
    if on_node is not None:
        on_node(node)
    server = await PeerServer(node, host, port, private=private).start()
    if plain is not None:
        try:
            await server.listen(*plain)
        except TransportError:
            await server.close()
            node.close()
            raise
    puller = None
    if pull or peers:
        puller = Puller(node)
        server.wire.on_event = lambda: puller.poll(now_ms())
    if pull:
        server.wire.on_accept = lambda conn: puller.accept(conn, now_ms())
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    if signals:
        _on_signals(loop, stop, True)
    dialers = [asyncio.create_task(keep_dialing(server.wire, puller, p, stop, private=private)) for p in peers]
    try:
        if ready is not None:
            for listen_host, listen_port, _ in server.listeners:
                ready(listen_host, listen_port)
        await stop.wait()
    finally:
        stop.set()
        await asyncio.gather(*dialers, return_exceptions=True)
        if signals:
            _on_signals(loop, stop, False)
        if puller is not None:
            puller.close()
            server.wire.flush()
        await server.close()
        node.close()
    summary = {"listen": f"{server.host}:{server.port}", **node.snapshot()}
    if plain is not None:
        summary["plain_listen"] = f"{server.listeners[1][0]}:{server.listeners[1][1]}"
    return summary



async def run_sync(
    store: Store,
    address: str,
    *,
    channels: Iterable[str] | None = None,
    live: bool = False,
    window: tuple[int, int] | None = None,
    progress: Progress | None = None,
    timeout: float = 600.0,
    progress_timeout: float = DEFAULT_PROGRESS_TIMEOUT / 1000,
    duration: float | None = None,
    stop: asyncio.Event | None = None,
    policy: PeerLimits = DEFAULT_POLICY,
    link: _Link | None = None,
    cabal_key: bytes | None = None,
    keypair: Keypair | None = None,
    prologue: bytes = CABLE_PROLOGUE,
    signals: bool = True,
) -> dict:
    """Sync ``store`` from the peer at ``address``; return the sync summary (see :meth:`cablestore.peer.sync.Sync.summary`).

    A finite sync returns once every request concluded, or with a
    ``reason`` when the peer fails it: nothing useful for
    ``progress_timeout`` seconds, the whole sync longer than ``timeout``
    seconds, or the peer closing, breaking the framing, answering wrongly or
    listing more than the memory budget holds.  With ``live``: until ``stop``
    is set, SIGINT/SIGTERM, ``duration`` seconds, or such a failure.
    ``link``: a connection to ``address`` already open (see :func:`sync_path`).
    ``cabal_key``: initiate the Cable Handshake with this key (the store is
    tied to the cabal first, ``Store.join_cabal``), then speak draft8's
    framing; ``keypair``: the static key's Ed25519 keypair (None: a fresh
    one); ``prologue``: ``CABLE/1.0`` (the spec's) or ``CABLE1.0``
    (cable-handshake.ts 1.0.0, cable.rs).  ``signals``: with ``live``,
    SIGINT and SIGTERM set ``stop`` (False: the caller owns its signals).

    Raised rather than summarised, as they are the configuration's and a
    rerun cannot help: :class:`cablestore.errors.NotHandshakeError` (a
    private sync meeting a plain peer), :class:`cablestore.errors.WrongCabalKeyError`,
    :class:`cablestore.errors.HandshakeRequiredError` (a plain sync closed
    before any answer: the peer may be private), and
    :class:`cablestore.errors.CabalKeyRequiredError` (a plain sync of a store
    bound to a private cabal).
    """
    private = None
    try:
        if cabal_key is not None:
            private = PrivateCabal(bytes(cabal_key), keypair, prologue)
            store.join_cabal(private.cabal_key)
        else:
            require_cabal_key(store, "sync")  # a sync answers the remote's requests too
    except BaseException:
        if link is not None:
            link.transport.abort()
        raise
    if link is None:
        link = await dial(*parse_address(address))
    node = Node(store, policy=policy)
    wire = Wire(node)
    conn = attach_dialled(wire, link, address, private)
    sync = Sync(conn, address, channels=channels, live=live, window=window, progress_timeout=int(progress_timeout * 1000))
    finished = asyncio.Event()
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    if live and signals:
        _on_signals(loop, stop, True)
    timer = loop.call_later(duration, stop.set) if live and duration else None

    def step() -> None:
        sync.poll(now_ms())
        if progress is not None:
            progress.count = conn.stats["ingested"]
            progress.advance(0)
        if sync.reason is not None or conn.closed or (sync.done and not live):
            finished.set()

    started = loop.time()
    wire.on_event = step
    wire.tick_seconds = min(wire.tick_seconds, max(0.05, progress_timeout / 4))
    step()
    wire.flush()
    waiters = [asyncio.create_task(finished.wait()), asyncio.create_task(stop.wait())]
    try:
        done, _ = await asyncio.wait(waiters, timeout=None if live else timeout, return_when=asyncio.FIRST_COMPLETED)
        if not done:
            sync.abandon(f"did not finish within {timeout:g} s")
    finally:
        if timer is not None:
            timer.cancel()
        summary = sync.summary()
        summary["seconds"] = round(loop.time() - started, 3)
        sync.abandon(sync.reason or "stopped")
        wire.flush()
        for task in waiters:
            task.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        await wire.close()
        node.close()
        if live and signals:
            _on_signals(loop, stop, False)
    failure = handshake_failure(conn, private, summary.get("complete", False), sync.ended_by_close)
    if failure is not None:
        raise failure
    return summary

