"""The ``cablestore`` command: a thin layer over the library.

Every subcommand parses arguments, calls one library function and prints its
result (``--json`` for machines).  Logic lives in the library, not here.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import __version__


def _cmd_demo(args) -> int:
    from .demo import run_demo

    report = run_demo(args.dir, posts=args.posts, seed=args.seed, quiet=args.quiet or args.json)
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    return 0 if report.get("ok", True) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="cablestore", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"cablestore {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser("demo", help="build a sample store and show what it answers")
    demo.add_argument("--dir", default=None, help="where to build the sample store (default: a temporary directory)")
    demo.add_argument("--posts", type=int, default=2000, help="how many posts to generate (default: 2000)")
    demo.add_argument("--seed", type=int, default=1, help="workload seed (default: 1)")
    demo.add_argument("--quiet", action="store_true", help="print only the summary")
    demo.add_argument("--json", action="store_true", help="print the report as JSON")
    demo.set_defaults(func=_cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from .errors import CableError

    try:
        return args.func(args)
    except CableError as exc:
        print(f"cablestore: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
