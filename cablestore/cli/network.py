"""``cablestore serve`` and ``cablestore sync``: a Cable peer over TCP (see cablestore.peer.transport)."""

from __future__ import annotations

import asyncio
import json

from cablestore.cli.args import positive_float, print_json


def _cmd_serve(args) -> int:
    from cablestore.peer.transport import run_server
    from cablestore.store.store import Store

    def ready(host, port):
        if not args.quiet:
            print(f"listening on {host}:{port}", flush=True)

    from pathlib import Path

    from cablestore.errors import StoreError

    if not Path(args.store).is_dir():  # LevelDB would leave an empty directory behind
        raise StoreError(f"{args.store} does not exist")
    with Store(args.store, create=False) as store:
        summary = asyncio.run(run_server(store, args.listen, ready=ready))
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    return 0


def _cmd_sync(args) -> int:
    from cablestore.peer.transport import sync_path
    from cablestore.progress import Progress

    progress = Progress(quiet=args.quiet or args.json).stage("sync: posts ingested")
    summary = asyncio.run(sync_path(args.store, args.connect, channels=args.channel or None, live=args.live, progress=progress, timeout=args.timeout))
    progress.done()
    if args.json:
        print_json(summary)
    else:
        state = "complete" if summary["complete"] else "INCOMPLETE"
        print(
            f"synced {len(summary['channels'])} channels from {summary['peer']}: {summary['posts_ingested']} posts ingested, "
            f"{summary['posts_refused']} refused, {summary['messages_dropped']} messages dropped; {state}"
        )
    return 0 if summary["complete"] or args.live else 1


def register(sub) -> None:
    """Add ``serve`` and ``sync`` to the ``cablestore`` subcommands."""

    p = sub.add_parser("serve", help="answer Cable peers over TCP from a store (Ctrl-C stops)")
    p.add_argument("store", help="the store directory (must exist)")
    p.add_argument("--listen", required=True, metavar="HOST:PORT", help="address to listen on (port 0: any free port)")
    p.add_argument("--quiet", action="store_true", help="do not print the listening address")
    p.add_argument("--json", action="store_true", help="print a JSON summary on exit")
    p.set_defaults(func=_cmd_serve)

    p = sub.add_parser("sync", help="pull what a Cable peer has and this store lacks (created if missing)")
    p.add_argument("store", help="the store directory to fill (created if missing)")
    p.add_argument("--connect", required=True, metavar="HOST:PORT", help="the peer to sync from")
    p.add_argument("--channel", action="append", metavar="NAME", help="sync this channel (repeatable; default: every channel the peer lists)")
    p.add_argument("--live", action="store_true", help="stay connected and keep receiving new posts (Ctrl-C stops)")
    p.add_argument("--timeout", type=positive_float, default=600.0, help="give up a finite sync after this many seconds (default: 600)")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=_cmd_sync)
