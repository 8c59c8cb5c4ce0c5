"""``cablestore serve`` and ``cablestore sync``: a Cable peer over TCP (see cablestore.peer.transport)."""

from __future__ import annotations

import asyncio
import json
import os

from cablestore.cli.args import (
    MAX_CONNECTIONS,
    MAX_MEMORY_MB,
    add_local_user_flag,
    channel_name,
    int_at_least,
    open_existing,
    peer_address,
    positive_float,
    print_json,
    write_port_file,
)
from cablestore.errors import ArgumentError
from cablestore.peer.limits import DEFAULT_POLICY, STORE_CACHE_MB, VERIFY_WORKERS, PeerLimits
from cablestore.progress import plural


def _serve_policy(args) -> PeerLimits:
    return PeerLimits(
        max_connections=args.max_connections,
        memory_mb=args.memory_mb,
        live_per_peer=args.max_live,
        idle_timeout=int(args.idle_timeout * 1000),
        frame_timeout=int(args.slow_timeout * 1000),
        stall_timeout=int(args.slow_timeout * 1000),
        request_timeout=int(args.request_timeout * 1000),
        handshake_timeout=int(args.handshake_timeout * 1000),
        connections_per_address=args.max_per_address,
        connections_per_user=args.max_per_user,
        reconcile=0 if args.no_reconcile else 1,
    )


def _private(args) -> dict:
    """``--cabal-key FILE`` and ``--key FILE`` read (refused if others can read them): the keyword arguments of the peer's entry points."""
    from cablestore.authoring.keyfile import read_cabal_key, read_keyfile

    if args.cabal_key is None:
        for flag, given in (("--key", args.key), ("--plain-listen", getattr(args, "plain_listen", None)), ("--legacy-prologue", getattr(args, "legacy_prologue", False))):
            if given:
                raise ArgumentError(f"{flag} goes with --cabal-key (a private cabal)")
        return {}
    return {"cabal_key": read_cabal_key(args.cabal_key), "keypair": read_keyfile(args.key) if args.key else None}


def _cmd_serve(args) -> int:
    from cablestore.peer import parse_address, run_server
    from cablestore.peer.control import ControlServer
    from cablestore.web import ServedWeb

    policy = _serve_policy(args)
    parse_address(args.listen, listening=True)  # a bad address fails before the store is opened
    if args.cabal:
        return _serve_cabals(args, policy)
    if args.store is None:
        raise ArgumentError("give the STORE to serve, or --cabal STORE=KEYFILE (one or more)")
    if args.plain_listen:
        parse_address(args.plain_listen, listening=True)
    private = _private(args)
    wrote = []

    def ready(host, port):
        first = not ready.seen
        ready.seen = True
        kind = ("private" if first else "plain") if private else None
        if args.port_file and first:
            write_port_file(args.port_file, port)
            wrote.append(args.port_file)
        if args.json:  # JSON lines: these now, the summary at exit
            line = {"listening": f"{host}:{port}", "port": port}
            if kind:
                line["kind"] = kind
            print(json.dumps(line, sort_keys=True), flush=True)
        elif not args.quiet:
            print(f"listening on {host}:{port}" + (f" ({kind})" if kind else ""), flush=True)

    ready.seen = False

    try:  # args.run_served: the dispatcher its control clients' commands run through, set by cablestore.cli.build_parser
        opened = open_existing(args.store, local_user=args.local_user, cache_mb=STORE_CACHE_MB, verify_workers=VERIFY_WORKERS)
        with opened as store, ServedWeb(store) as web, ControlServer(args.store, args.run_served(store)):
            summary = asyncio.run(
                run_server(store, args.listen, ready=ready, policy=policy, pull=not args.no_pull, plain_listen=args.plain_listen, on_node=web.attach,
                           peers=args.peer or (), **private)
            )
    finally:
        for path in wrote:
            try:
                os.unlink(path)
            except OSError:
                pass
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    return 0


def _serve_cabals(args, policy) -> int:
    """``serve --listen HOST:PORT --cabal STORE=KEYFILE ...``: several private cabals on one port."""
    import contextlib

    from cablestore.authoring.keyfile import read_cabal_key, read_keyfile
    from cablestore.peer import run_server
    from cablestore.peer.control import ControlServer
    from cablestore.web import ServedWeb

    if args.store is not None or args.cabal_key or args.plain_listen:
        raise ArgumentError("--cabal serves each STORE=KEYFILE on --listen: give no STORE, --cabal-key or --plain-listen with it")
    pairs = []
    for given in args.cabal:
        store, sep, keyfile = given.rpartition("=")
        if not sep or not store or not keyfile:
            raise ArgumentError(f"--cabal takes STORE=KEYFILE, got {given!r}")
        pairs.append((store, read_cabal_key(keyfile)))

    def ready(host, port):
        if args.port_file:
            write_port_file(args.port_file, port)
        if args.json:
            print(json.dumps({"listening": f"{host}:{port}", "port": port, "cabals": len(pairs)}, sort_keys=True), flush=True)
        elif not args.quiet:
            print(f"listening on {host}:{port} (private, {plural(len(pairs), 'cabal')})", flush=True)

    # The stores share what one served store has in the memory budget (BASE_BYTES counts one): its block cache,
    # at least 1 MB each, and its LevelDB write buffer (64 MB), at least 4 MB each.
    cache_mb, write_buffer_mb = max(1, STORE_CACHE_MB // len(pairs)), max(4, 64 // len(pairs))
    try:
        with contextlib.ExitStack() as stack:
            stores, webs = [], {}
            for path, key in pairs:  # each store's commands run through serve, on its own control socket, as with one store
                store = stack.enter_context(open_existing(path, local_user=args.local_user, cache_mb=cache_mb, write_buffer_mb=write_buffer_mb,
                                                          verify_workers=VERIFY_WORKERS))
                webs[id(store)] = stack.enter_context(ServedWeb(store))
                stack.enter_context(ControlServer(path, args.run_served(store)))
                stores.append((store, key))
            summary = asyncio.run(run_server(None, args.listen, ready=ready, policy=policy, pull=not args.no_pull, cabals=stores,
                                             keypair=read_keyfile(args.key) if args.key else None, on_node=lambda node: webs[id(node.store)].attach(node)))
    finally:
        if args.port_file and os.path.exists(args.port_file):
            os.unlink(args.port_file)
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    return 0


def _cmd_sync(args) -> int:
    from cablestore.peer import parse_address, sync_path
    from cablestore.progress import Progress
    from cablestore.wire.handshake import CABLE_PROLOGUE, LEGACY_PROLOGUE

    parse_address(args.connect)
    policy = PeerLimits(memory_mb=args.memory_mb, max_connections=4, reconcile=0 if args.no_reconcile else 1)
    private = _private(args)
    if private:
        private["prologue"] = LEGACY_PROLOGUE if args.legacy_prologue else CABLE_PROLOGUE
    progress = Progress(quiet=args.quiet or args.json).stage("sync: posts ingested")
    from cablestore.cli.args import served_store

    served = served_store()  # run through serve: sync into the store it holds
    try:
        summary = asyncio.run(
            (sync_path if served is None else _sync_served)(
                args.store if served is None else served,
                args.connect,
                local_user=args.local_user,
                channels=args.channel or None,
                live=args.live,
                progress=progress,
                timeout=args.timeout,
                progress_timeout=args.progress_timeout,
                duration=args.duration,
                policy=policy,
                **private,
            )
        )
    finally:
        progress.done()  # end the progress line before anything else is printed
    if args.json:
        print_json(summary)
    else:
        state = "complete" if summary["complete"] else f"INCOMPLETE: {summary['reason']}"
        print(
            f"synced {plural(len(summary['channels']), 'channel')} from {summary['peer']}: {plural(summary['posts_ingested'], 'post')} ingested, "
            f"{summary['posts_refused']} refused, {plural(summary['messages_dropped'], 'message')} dropped; {state}"
        )
    return 0 if summary["complete"] else 1


async def _sync_served(store, address: str, local_user=None, **kw) -> dict:
    """``sync`` into the store ``serve`` holds (``local_user`` is the served store's own)."""
    from cablestore.peer import run_sync

    if kw.get("cabal_key") is not None:
        store.join_cabal(bytes(kw["cabal_key"]))
    return await run_sync(store, address, **kw)


def register(sub) -> None:
    """Add ``serve`` and ``sync`` to the ``cablestore`` subcommands."""
    d = DEFAULT_POLICY
    p = sub.add_parser(
        "serve",
        help="a Cable peer over TCP: answer peers from a store and pull what they have (Ctrl-C stops)",
        description=(
            "Answer Cable peers over TCP from a store, within the limits below (see docs/hostile-peers.md). "
            "By default serve also pulls from every peer that connects: its channel list, then time range and "
            "channel state of every channel either side knows (under each spelling the peer uses), the moderation "
            "state, and live requests kept open, so posts written on a connected client reach this store and its "
            "other peers; a reconnecting peer is asked only for what is newer than its cursor (kept per remote "
            "host). --no-pull only answers. While serving, read and post commands on the same store "
            "(show, stats, post, ...) run through the serving process (a control socket in the store directory)."
        ),
    )
    p.add_argument("store", nargs="?", help="the store directory (must exist); none with --cabal")
    add_local_user_flag(p)
    p.add_argument("--listen", required=True, metavar="HOST:PORT", help="address to listen on (port 0: any free port)")
    p.add_argument("--quiet", action="store_true", help="do not print the listening address")
    p.add_argument("--json", action="store_true", help='JSON lines: {"listening": ..., "port": ...} once listening, the counts on exit')
    p.add_argument("--port-file", metavar="PATH", help="write the port listened on to PATH once listening (removed on exit)")
    p.add_argument("--no-pull", action="store_true", help="only answer: do not sync from the peers that connect (default: pull their posts, then live)")
    p.add_argument("--no-reconcile", action="store_true", help="native Cable requests only: neither answer nor start set reconciliation (docs/reconcile.md)")
    p.add_argument(
        "--peer", action="append", type=peer_address, metavar="HOST:PORT",
        help="keep a connection to this peer (repeatable): sync from it, answer it, stay live, and reconnect by itself with backoff when it goes away "
        "(private with --cabal-key)",
    )
    g = p.add_argument_group("a private cabal (docs/security.md)")
    g.add_argument(
        "--cabal-key", metavar="FILE",
        help="a cabal key file (cablestore cabal new): every connection to --listen must pass the Cable Handshake with this key, then speaks draft8; ties the store to the cabal",
    )
    g.add_argument("--key", metavar="FILE", help="with --cabal-key: your key file, whose key authenticates this peer (default: a fresh key for the run: an unknown user)")
    g.add_argument(
        "--cabal", action="append", metavar="STORE=KEYFILE",
        help="serve STORE to the holders of KEYFILE's cabal key only (repeatable: many cabals on the one --listen port; the handshake picks the cabal)",
    )
    g.add_argument(
        "--plain-listen", metavar="HOST:PORT",
        help="with --cabal-key: also a plain listener (legacy TCP, as cable-client.js speaks): anyone who reaches it reads every post of the store and can write to it",
    )
    g = p.add_argument_group("limits (a peer over its share is refused or closed; others are not affected)")
    g.add_argument(
        "--max-connections", type=int_at_least(1, MAX_CONNECTIONS), default=d.max_connections, metavar="N",
        help=f"connections at once; more are closed at once (default: {d.max_connections})",
    )
    g.add_argument(
        "--memory-mb", type=int_at_least(1, MAX_MEMORY_MB), default=d.memory_mb, metavar="MB",
        help=f"memory budget of the process; the peers' buffers get what the base and --max-connections leave (default: {d.memory_mb})",
    )
    g.add_argument(
        "--max-per-address", type=int_at_least(0, MAX_CONNECTIONS), default=d.connections_per_address, metavar="N",
        help="connections from one host at once; more are closed at once (default: 0, no limit)",
    )
    g.add_argument(
        "--max-per-user", type=int_at_least(0, MAX_CONNECTIONS), default=d.connections_per_user, metavar="N",
        help=f"connections of one user identified by the handshake; their live requests count together (default: {d.connections_per_user})",
    )
    g.add_argument(
        "--max-live", type=int_at_least(0, MAX_CONNECTIONS), default=d.live_per_peer, metavar="N", help=f"live requests per peer; more are refused (default: {d.live_per_peer})"
    )
    g.add_argument(
        "--idle-timeout", type=positive_float, default=d.idle_timeout / 1000, metavar="S",
        help=f"close a peer that sends nothing and has nothing open (default: {d.idle_timeout // 1000})",
    )
    g.add_argument(
        "--slow-timeout", type=positive_float, default=d.frame_timeout / 1000, metavar="S",
        help=f"close a peer that takes longer to send one message, or reads none of its answers for this long (default: {d.frame_timeout // 1000})",
    )
    g.add_argument(
        "--request-timeout", type=positive_float, default=d.request_timeout / 1000, metavar="S", help=f"give up a forwarded request (default: {d.request_timeout // 1000})"
    )
    g.add_argument(
        "--handshake-timeout", type=positive_float, default=d.handshake_timeout / 1000, metavar="S",
        help=f"close a connection whose Cable Handshake takes longer (default: {d.handshake_timeout // 1000})",
    )
    p.set_defaults(func=_cmd_serve)

    p = sub.add_parser(
        "sync", help="pull what a Cable peer has and this store lacks (created if missing)",
        description=(
            "Pull what a Cable peer has and this store lacks: its channel list, then the time range and state of each channel, "
            "from a cursor kept per peer and channel, so a rerun (after an interruption, or a limit that closed the connection) "
            "resumes where the last complete sync ended. A `cablestore serve` on the other side also pulls from the connecting "
            "side (unless it runs --no-pull): syncing to it sends it this store's posts too. A peer that keeps sending is never "
            "cut off however slow; one that sends no byte of a begun message for 20 s, or trickles it below 256 bytes a second, is "
            "closed, and the summary names the limit. Exit status: 0 complete; 1 incomplete (it began, then a request failed or "
            "timed out, or a limit closed the connection: the summary says which, and a rerun resumes); 2 it could not sync at all: "
            "no connection (refused, unreachable, a bad address), a failed handshake (a wrong or missing cabal key), or a usage or store error."
        ),
    )
    p.add_argument("store", help="the store directory to fill (created if missing)")
    add_local_user_flag(p)
    p.add_argument("--connect", required=True, metavar="HOST:PORT", help="the peer to sync from")
    p.add_argument("--channel", action="append", type=channel_name, metavar="NAME", help="sync this channel (repeatable; default: every channel the peer lists)")
    p.add_argument("--live", action="store_true", help="stay connected and keep receiving new posts (Ctrl-C stops)")
    p.add_argument("--no-reconcile", action="store_true", help="native Cable requests only, even with a peer that speaks set reconciliation (docs/reconcile.md)")
    p.add_argument("--duration", type=positive_float, metavar="S", help="with --live: stop after this many seconds")
    p.add_argument("--timeout", type=positive_float, default=600.0, metavar="S", help="give up a finite sync after this many seconds (default: 600)")
    p.add_argument("--progress-timeout", type=positive_float, default=30.0, metavar="S", help="give up when the peer brings no answer or post for this long (default: 30)")
    p.add_argument(
        "--memory-mb", type=int_at_least(1, MAX_MEMORY_MB), default=d.memory_mb, metavar="MB", help=f"memory budget: bounds the posts waited on at once (default: {d.memory_mb})"
    )
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    g = p.add_argument_group("a private cabal (docs/security.md)")
    g.add_argument("--cabal-key", metavar="FILE", help="a cabal key file: initiate the Cable Handshake with this key, then speak draft8; ties the store to the cabal")
    g.add_argument("--key", metavar="FILE", help="with --cabal-key: your key file, whose key authenticates this peer (default: a fresh key for the run: an unknown user)")
    g.add_argument("--legacy-prologue", action="store_true", help="with --cabal-key: the prologue CABLE1.0 (cable-handshake.ts 1.0.0, cable.rs) instead of the spec's CABLE/1.0")
    p.set_defaults(func=_cmd_sync)
