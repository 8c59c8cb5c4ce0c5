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
from cablestore.cli import authoring, maintenance, moderation, network, posts, reading, verification
from cablestore.compiled import HOT_PATH

GROUPS = (posts, verification, maintenance, reading, authoring, moderation, network)


def build_parser() -> argparse.ArgumentParser:
    """The ``cablestore`` argument parser, with every subcommand."""
    parser = argparse.ArgumentParser(prog="cablestore", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"cablestore {__version__} (hot path: {HOT_PATH})")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in GROUPS:
        group.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``cablestore`` with ``argv`` (default: the command line); return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from cablestore.cli.args import report_error
    from cablestore.errors import CableError

    try:
        return args.func(args)
    except BrokenPipeError:  # `cablestore dump STORE | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (CableError, OSError) as exc:  # one line on stderr (and the class in --json output): exit 2
        return report_error(args, exc)
    except KeyboardInterrupt:
        print(f"cablestore {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
