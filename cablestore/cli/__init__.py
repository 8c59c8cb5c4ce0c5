"""cablestore: a Cable post store with materialized views and a Spark rebuild.

Every subcommand parses its arguments, calls one library function and prints
the result (``--json`` for machines).  The logic lives in the library.
Exit status: 0 success (or consistent), 1 differences found or remaining,
2 usage, input or environment errors.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable

from cablestore import __version__


def _print_json(data) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False))


def _cmd_demo(args) -> int:
    from cablestore.demo import run_demo

    report = run_demo(args.dir, posts=args.posts, seed=args.seed, quiet=args.quiet or args.json, engine=args.engine)
    if args.json:
        _print_json(report)
    return 0 if report["ok"] else 1


def _cmd_generate(args) -> int:
    from cablestore.authoring.workload import Workload, write_posts
    from cablestore.progress import Progress

    progress = Progress(quiet=args.quiet).stage("generate + sign", args.posts)

    def counted():
        for buf in Workload(args.seed, args.posts):
            progress.advance()
            yield buf

    n = write_posts(args.out, counted())
    progress.done()
    summary = {"posts": n, "seed": args.seed, "out": str(args.out)}
    _print_json(summary) if args.json else print(f"wrote {n} posts (seed {args.seed}) to {args.out}")
    return 0


def _cmd_ingest(args) -> int:
    from cablestore.authoring.workload import read_posts
    from cablestore.progress import Progress
    from cablestore.store.store import Store

    bufs = [buf for path in args.files for buf in read_posts(path)]
    progress = Progress(quiet=args.quiet).stage("ingest", len(bufs))
    refused: dict[str, int] = {}
    new = 0
    with Store(args.store, sync=args.sync, verify_signatures=not args.no_verify_signatures, verify_workers=args.workers) as store:
        for i in range(0, len(bufs), args.batch):
            for r in store.ingest_many(bufs[i : i + args.batch]):
                if r.ok:
                    new += r.new
                else:
                    refused[type(r.error).__name__] = refused.get(type(r.error).__name__, 0) + 1
            progress.advance(len(bufs[i : i + args.batch]))
    progress.done()
    accepted = len(bufs) - sum(refused.values())
    summary = {"read": len(bufs), "accepted": accepted, "new": new, "already_stored": accepted - new, "refused": refused}
    _print_json(summary) if args.json else print(format_ingest(summary, args))
    return 0


def format_ingest(summary: dict, args) -> str:
    """The ingest summary as lines: new, already stored, refused by reason."""
    files = len(args.files)
    lines = [
        f"read {summary['read']} posts from {files} file{'s' if files != 1 else ''} into {args.store}",
        f"  new:            {summary['new']}",
        f"  already stored: {summary['already_stored']}",
        f"  refused:        {sum(summary['refused'].values())}",
    ]
    lines += [f"    {reason}: {n}" for reason, n in sorted(summary["refused"].items(), key=lambda kv: (-kv[1], kv[0]))]
    return "\n".join(lines)


def _cmd_export(args) -> int:
    from cablestore.progress import Progress
    from cablestore.rebuild import export
    from cablestore.store.store import Store
    from cablestore.store.txn import DELETED, POSTS

    progress = Progress(quiet=args.quiet)
    with Store(args.store, create=False) as store, store.in_flight():
        total = None
        if progress.enabled:  # a bar needs a total; count only when one is drawn
            total = sum(1 for p in (POSTS, DELETED) for _ in store.db.iterator(prefix=p, include_value=False))
        manifest = export(store.db, args.dir, args.partitions, progress.stage("export posts and tombstones", total))
    progress.done()
    summary = {"dir": str(args.dir), **manifest["counts"], "partitions": manifest["partitions"]}
    _print_json(summary) if args.json else print(
        f"exported {summary['posts']} posts, {summary['tombstones']} tombstones and {summary['live']} view entries "
        f"to {args.dir} ({args.partitions} partitions)"
    )
    return 0


def _cmd_rebuild(args) -> int:
    from cablestore.progress import Progress
    from cablestore.rebuild import rebuild

    if args.store is None and args.snapshot is None:
        print(f"cablestore {args.command}: give a STORE or --snapshot DIR", file=sys.stderr)
        return 2
    with _terminate_as_interrupt():
        report = rebuild(
            args.store,
            snapshot=args.snapshot,
            repair=args.repair,
            engine=args.engine,
            master=args.master,
            partitions=args.partitions,
            check_signatures=not args.no_verify_signatures,
            progress=Progress(quiet=args.quiet or args.json),
            spark_log=args.spark_log,
        )
    if args.json:
        _print_json(report.to_dict())
    else:
        print(format_report(report, args))
    return 0 if report.consistent else 1


ENGINE_DEFAULTS = {"rebuild": "spark", "check": "local"}


def repair_hint(args) -> str:
    """The command that repairs what ``args`` (a rebuild or check) found, with the same engine."""
    if args.store is None:
        return f"verify the store itself, then repair it: `cablestore {args.command} STORE --repair`"
    parts = ["cablestore", args.command, shlex.quote(str(args.store))]
    if args.engine != ENGINE_DEFAULTS.get(args.command):
        parts += ["--engine", args.engine]
    if args.master:
        parts += ["--master", shlex.quote(args.master)]
    return f"run `{' '.join(parts + ['--repair'])}` to fix them"


@contextlib.contextmanager
def _terminate_as_interrupt():
    """SIGTERM unwinds like Ctrl-C (temporary snapshot removed, exit 130), during a rebuild only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    # py4j logs an interrupted call through the root logger, which would print a traceback.
    root = logging.getLogger()
    quiet = logging.NullHandler() if not root.handlers else None
    if quiet:
        root.addHandler(quiet)
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if quiet:
            root.removeHandler(quiet)


def format_report(report, args) -> str:
    """A rebuild or check report as the lines ``cablestore rebuild`` / ``check`` print."""
    data = report.to_dict()
    mode = "repair" if args.repair else "verify"
    lines = [
        f"cablestore {args.command} --{mode}: {args.store or args.snapshot} ({data['engine']} engine, {data['partitions']} partitions)",
        f"  primary data: {data['posts']} posts, {data['tombstones']} tombstones",
    ]
    if data["repaired"]:
        r = data["repaired"]
        lines.append(f"  repaired: removed {r['removed_records']} deleted posts, quarantined {r.get('quarantined', 0)} faulty records, deleted {r['deleted']} and wrote {r['written']} view entries")
    lines.append(f"  {'view':<10}{'live':>10}{'recomputed':>12}{'missing':>9}{'extra':>7}{'different':>11}")
    for name, v in data["views"].items():
        lines.append(f"  {name:<10}{v['live']:>10}{v['recomputed']:>12}{v['missing']:>9}{v['extra']:>7}{v['different']:>11}")
        for kind, keys in v["examples"].items():
            lines += [f"      {kind}: {k}" for k in keys]
    faults = {k: v for k, v in data["faults"].items() if v}
    if faults:
        for kind, items in faults.items():
            lines.append(f"  fault {kind}: {len(items)}")
            lines += [f"      {f['hash']} {f['detail']}" for f in items[:5]]
    else:
        lines.append("  primary-data faults: none")
    if report.consistent:
        lines.append("  result: consistent")
    elif args.repair:
        lines.append("  result: DIFFERENCES REMAIN after repair")
    else:
        lines.append(f"  result: DIFFERENCES FOUND; {repair_hint(args)}")
    return "\n".join(lines)


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer of at least {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


positive_int = int_at_least(1)


def positive_float(text: str) -> float:
    """An argparse type: a finite number above 0 (seconds, say)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text}")
    return value


def partitions_int(text: str) -> int:
    """An argparse type: a partition count, 1 to 256 (one hash-prefix byte)."""
    value = positive_int(text)
    if value > 256:
        raise argparse.ArgumentTypeError(f"must be at most 256, got {value}")
    return value


def add_output_flags(p) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def build_parser() -> argparse.ArgumentParser:
    """The ``cablestore`` argument parser, with every subcommand."""
    parser = argparse.ArgumentParser(prog="cablestore", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"cablestore {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("demo", help="build a sample store, show its answers, verify it on Spark")
    p.add_argument("--dir", default=None, help="where to build the store (default: a temporary directory)")
    p.add_argument("--posts", type=positive_int, default=2000, help="posts to generate (default: 2000)")
    p.add_argument("--seed", type=int, default=1, help="workload seed (default: 1)")
    p.add_argument("--engine", choices=("spark", "local"), default="spark", help="rebuild engine (default: spark)")
    add_output_flags(p)
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("generate", help="write a deterministic workload of signed posts to a file")
    p.add_argument("--seed", type=int, default=1, help="workload seed: the same seed gives the same bytes (default: 1)")
    p.add_argument("--posts", type=positive_int, default=1000, help="posts to generate (default: 1000)")
    p.add_argument("out", help="output file ([u32 big-endian length][post] records)")
    add_output_flags(p)
    p.set_defaults(func=_cmd_generate)

    p = sub.add_parser("ingest", help="ingest posts files into a store (created if missing)")
    p.add_argument("store", help="the store directory (created if missing)")
    p.add_argument("files", nargs="+", help="posts files ([u32 big-endian length][post] records)")
    p.add_argument("--batch", type=positive_int, default=1000, help="posts per WriteBatch (default: 1000)")
    p.add_argument("--sync", action="store_true", help="sync every batch to disk")
    p.add_argument("--workers", type=positive_int, default=1,
                   help="processes verifying signatures (default: 1, in this process; 2 or more: worker processes)")
    p.add_argument("--no-verify-signatures", action="store_true", help="trust signatures (re-indexing only)")
    add_output_flags(p)
    p.set_defaults(func=_cmd_ingest)

    p = sub.add_parser("export", help="write a snapshot a Spark cluster can read")
    p.add_argument("store", help="the store directory (read only)")
    p.add_argument("dir", help="the snapshot directory to write (must not hold a snapshot)")
    p.add_argument("--partitions", type=partitions_int, default=16, help="partitions by hash prefix, 1-256 (default: 16)")
    add_output_flags(p)
    p.set_defaults(func=_cmd_export)

    for name, engine, text in (
        ("rebuild", "spark", "recompute every view to verify (default) or repair a store"),
        ("check", "local", "the same as rebuild, with the in-process engine by default"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("store", nargs="?", help="the store directory (optional with --snapshot)")
        mode = p.add_mutually_exclusive_group()
        mode.add_argument("--verify", action="store_true", help="report differences, change nothing (default)")
        mode.add_argument("--repair", action="store_true", help="make the views equal to the recomputation, then verify")
        p.add_argument("--engine", choices=("spark", "local"), default=engine,
                       help=f"spark (a PySpark job) or local (in-process) (default: {engine})")
        p.add_argument("--master", default=None, help="Spark master (default: local[*], or spark-submit's); Spark engine only")
        p.add_argument(
            "--spark-log",
            default=None,
            metavar="FILE",
            help="keep Spark's own output (Java/log4j) in FILE (default: a temporary file, named only if the run fails)",
        )
        p.add_argument("--snapshot", default=None, help="read an exported snapshot instead of exporting one")
        p.add_argument("--partitions", type=partitions_int, default=16, help="partitions / digest buckets, 1-256 (default: 16)")
        p.add_argument("--no-verify-signatures", action="store_true", help="skip Ed25519 checks of stored posts")
        add_output_flags(p)
        p.set_defaults(func=_cmd_rebuild)
    from . import maintenance; maintenance.register(sub)  # noqa: E702
    from . import inspect; inspect.register(sub)  # noqa: E702
    from . import authoring; authoring.register(sub)  # noqa: E702
    from . import network; network.register(sub)  # noqa: E702
    from . import reindexing; reindexing.register(sub)  # noqa: E702
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``cablestore`` with ``argv`` (default: the command line); return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from cablestore.errors import CableError

    try:
        return args.func(args)
    except BrokenPipeError:  # `cablestore dump STORE | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except CableError as exc:
        print(f"cablestore {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"cablestore {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"cablestore {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
