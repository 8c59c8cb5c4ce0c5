"""cablestore: a Cable post store with materialized views and a Spark rebuild.

Every subcommand parses its arguments, calls one library function and prints
the result (``--json`` for machines).  The logic lives in the library; each
module of this package holds one group of commands and registers them, and
they share only :mod:`cablestore.cli.args`.
Exit status: 0 success (or consistent), 1 differences found or remaining,
2 usage, input or environment errors: then one line on stderr,
``cablestore COMMAND: ErrorClass: message`` (the class is the library's, so
a script and a person see the same name), and with ``--json`` the object
``{"error": ErrorClass, "message": ...}`` on stdout.
"""

from __future__ import annotations

import argparse
import os
import sys

from cablestore import __version__
from cablestore.cli import archive, authoring, maintenance, moderation, network, posts, reading, search, verification
from cablestore.compiled import HOT_PATH

GROUPS = (posts, verification, maintenance, reading, search, authoring, moderation, network, archive)


def build_parser() -> argparse.ArgumentParser:  # a cablestore.cli.args.Parser
    """The ``cablestore`` argument parser, with every subcommand."""
    from cablestore.cli.args import Parser

    parser = Parser(prog="cablestore", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"cablestore {__version__} (hot path: {HOT_PATH})")
    # ``serve`` runs its control clients' commands through this package's main(): handed to it here, so the
    # command module imports no more than cablestore.cli.args and the library (no circle through this package).
    parser.set_defaults(run_served=run_served)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in GROUPS:
        group.register(sub)
    return parser


#: Commands that run through a ``serve`` holding their store (its control socket) instead of failing on its lock.
THROUGH_SERVE = frozenset({
    "show", "stats", "dump", "channels", "heads", "check", "post", "roles", "users", "moderation", "search",
    "role", "hide", "unhide", "drop", "undrop", "block", "unblock", "web", "export", "ingest", "sync", "seed",
})

#: Commands that need the store to themselves (every view rewritten, files moved): refused on a served store.
ALONE = frozenset({"reindex", "migrate", "recover", "rebuild"})


def _needs_store_alone(args) -> bool:
    if args.command in ALONE:
        return args.command != "rebuild" or args.store is not None
    return args.command == "check" and (args.repair or args.snapshot is not None or args.engine != "local")


def stop_serve_first(path, command: str):
    """The one error of a command that needs the store to itself while ``serve`` holds it (the same words for each)."""
    from cablestore.errors import StoreLockedError

    return StoreLockedError(f"{path} is held by a running `cablestore serve`; {command} needs the store to itself: stop serve first")


def run_served(store):
    """The function ``serve`` runs its control clients' commands with: ``main(argv)`` on ``store``, the one it holds."""
    from cablestore.cli.args import serving

    def run(argv: list, cwd: str) -> int:
        if not argv or argv[0] not in THROUGH_SERVE:
            print(f"cablestore: {argv[0] if argv else '(nothing)'} does not run through serve", file=sys.stderr)
            return 2
        with serving(store, cwd):
            return main(argv)

    return run


def _through_serve(args, argv: list, locked) -> int:
    """The store is locked: run the command in the ``serve`` holding it; re-raise ``locked`` if none does."""
    from cablestore.peer.control import call

    if args.command not in THROUGH_SERVE or getattr(args, "store", None) is None:
        raise locked
    if _needs_store_alone(args):
        raise stop_serve_first(args.store, args.command + (" --repair" if getattr(args, "repair", False) else ""))
    status = call(args.store, argv)
    if status is None:
        raise locked
    return status


def main(argv: list[str] | None = None) -> int:
    """Run ``cablestore`` with ``argv`` (default: the command line); return the exit status.

    A command of :data:`THROUGH_SERVE` whose store is held by ``cablestore
    serve`` runs in that process instead (:mod:`cablestore.peer.control`), with
    the same output and exit status.
    """
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from cablestore.cli.args import report_error, served_store, signals_as_interrupt
    from cablestore.errors import CableError, StoreLockedError
    from cablestore.peer.control import is_served

    try:
        if _needs_store_alone(args) and served_store() is None and is_served(args.store):
            raise stop_serve_first(args.store, args.command + (" --repair" if getattr(args, "repair", False) else ""))
        try:
            with signals_as_interrupt():
                return args.func(args)
        except StoreLockedError as exc:
            if served_store() is not None:
                raise
            return _through_serve(args, argv, exc)
    except BrokenPipeError:  # `cablestore dump STORE | head`: the reader has all it wanted
        if served_store() is None:  # (run through serve: the client left; nothing of this process to silence)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (CableError, OSError) as exc:  # one line on stderr (and the class in --json output): exit 2
        return report_error(args, exc)
    except KeyboardInterrupt:
        print(f"cablestore {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
