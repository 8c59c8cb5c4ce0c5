"""``cablestore web``: the read-only web archive of a store (see cablestore.web)."""

from __future__ import annotations

import asyncio
import contextlib
import os

from cablestore.cli.args import client_path, served_store, write_port_file
from cablestore.errors import StoreLockedError, TransportError


def _cmd_web(args) -> int:
    from cablestore.peer import parse_address
    from cablestore.web import ServedWeb, run_web
    from cablestore.web.follow import Followed

    host, port = parse_address(args.listen, listening=True)  # a bad address fails before the store is opened
    served = served_store()
    if served is not None:  # run through serve (the store is held there): the archive runs in that process
        web = ServedWeb.of(served)
        if web is None:
            raise TransportError("this serving process runs no web archive")
        port_file = client_path(args.port_file)
        bound = web.start(host, port, port_file)
        if port_file:
            write_port_file(port_file, bound)
        print(f"web archive of {args.store} at http://{_url_host(host)}:{bound}/ (in the serving process; stops with serve)")
        return 0
    from cablestore.peer.control import is_served

    if is_served(args.store):  # the archive takes no lock, so say the store is held: main() runs the command in serve
        raise StoreLockedError(f"{args.store} is held by a running `cablestore serve`")
    wrote = []

    def ready(host: str, bound: int) -> None:
        if args.port_file:
            write_port_file(args.port_file, bound)
            wrote.append(args.port_file)
        print(f"web archive of {args.store} at http://{_url_host(host)}:{bound}/ (read-only, following new posts; Ctrl-C stops)", flush=True)

    try:
        # Not the store itself: a copy of its files, renewed as writers change them, so that post,
        # ingest and serve still open the store while the archive runs.
        with contextlib.closing(Followed(args.store)) as followed:
            asyncio.run(run_web(followed, host, port, ready=ready))
    finally:
        for path in wrote:
            with contextlib.suppress(OSError):
                os.unlink(path)
    return 0


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def register(sub) -> None:
    """Add ``web`` to the ``cablestore`` subcommands."""
    from cablestore.web import DEFAULT_LISTEN

    p = sub.add_parser(
        "web",
        help="a read-only web archive of a store: channels, posts, users, moderation, search, status (Ctrl-C stops)",
        description=(
            "Serve a read-only web archive of a store on a local address: its channels, each channel's messages "
            "(newest first, paged), each post with its links both ways, users, the moderation state with who did what, "
            "when and why, search, and the store's status. Hidden posts are collapsed behind a marker; dropped and "
            "blocked posts are not held, so never shown. On a store `cablestore serve` holds, the archive runs in the "
            "serving process (through its control socket) until serve stops: the status page then lists the connected "
            "peers, and channel pages show new posts as they arrive."
        ),
    )
    p.add_argument("store", help="the store directory (must exist; read without locking it: post, ingest and serve work beside the archive)")
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT", help=f"address to listen on (default: {DEFAULT_LISTEN}; port 0: any free port)")
    p.add_argument("--port-file", metavar="PATH", help="write the port listened on to PATH once listening (removed on exit)")
    p.set_defaults(func=_cmd_web)
