"""Commands that verify and repair with the rebuild: ``export``, ``rebuild``, ``check``."""

from __future__ import annotations

import shlex
import sys

from cablestore.cli.args import MAX_WORKERS, add_output_flags, client_path, describe_lost_post, int_at_least, open_existing, partitions_int, print_json, store_or_path
from cablestore.progress import plural


def _cmd_export(args) -> int:
    from cablestore.progress import Progress
    from cablestore.rebuild import export_store
    progress = Progress(quiet=args.quiet)
    with open_existing(args.store, readonly=True) as store:  # run through serve: the store it holds
        manifest = export_store(
            store,
            client_path(args.dir) if "://" not in str(args.dir) else args.dir,
            args.partitions,
            progress,
            decoded=args.decoded,
            workers=args.workers,
            source=str(args.store),
        )
    progress.done()
    size = sum(f["bytes"] for f in manifest["files"].values())
    summary = {"dir": str(args.dir), **manifest["counts"], "partitions": manifest["partitions"], "bytes": size, "seconds": manifest["seconds"]}
    if args.json:
        print_json(summary)
        return 0
    decoded = f"; {plural(summary['decoded'], 'decoded post')}" if args.decoded else ""
    print(
        f"exported {plural(summary['posts'], 'post')}, {plural(summary['tombstones'], 'tombstone')} and "
        f"{plural(summary['live'], 'view entry', 'view entries')} to {args.dir} ({plural(args.partitions, 'partition')}{decoded})"
    )
    return 0


def _cmd_rebuild(args) -> int:
    from cablestore.progress import Progress
    from cablestore.rebuild import rebuild

    if args.store is None and args.snapshot is None:
        print(f"cablestore {args.command}: give a STORE or --snapshot SNAPSHOT", file=sys.stderr)
        return 2
    report = rebuild(
        store_or_path(args.store) if args.store is not None else None,
        snapshot=args.snapshot,
        repair=args.repair,
        engine=args.engine,
        master=args.master,
        partitions=args.partitions,
        check_signatures=not args.no_verify_signatures,
        progress=Progress(quiet=args.quiet or args.json),
        spark_log=args.spark_log,
        ship_env=not args.no_ship_env,
    )
    lost = _lost_posts(args.store, prune=args.repair) if args.store is not None and args.snapshot is None else []
    if args.json:
        print_json({**report.to_dict(), "lost_posts": lost})
    else:
        print(format_report(report, args))
        if lost:

            print(f"  lost posts: {plural(len(lost), 'post')} `cablestore recover` found gone are still missing (sync from a peer to bring them back):")
            print("\n".join(f"      {describe_lost_post(p)}" for p in lost[:20]))
    return 0 if report.consistent else 1


def _lost_posts(path, prune: bool) -> list[dict]:
    """The posts ``recover`` found gone that the store still lacks; with ``prune`` (a repair) the rows of those back are dropped."""
    with open_existing(path, readonly=not prune) as store:  # run through serve: the store it holds
        if prune:
            store.remember_lost([])
        return store.lost_posts()


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


def format_report(report, args) -> str:
    """A rebuild or check report as the lines ``cablestore rebuild`` / ``check`` print."""
    data = report.to_dict()
    mode = "repair" if args.repair else "verify"
    lines = [
        # With a snapshot the report is the snapshot's (its name and counts), whether or not a STORE was named too.
        f"cablestore {args.command} --{mode}: {args.snapshot or args.store} ({data['engine']} engine, {plural(data['partitions'], 'partition')})",
        f"  primary data: {plural(data['posts'], 'post')}, {plural(data['tombstones'], 'tombstone')}",
    ]
    if data["repaired"]:
        r = data["repaired"]
        lines.append(
            f"  repaired: removed {plural(r['removed_records'], 'deleted post')}, quarantined {plural(r.get('quarantined', 0), 'faulty record')}, "
            f"deleted {r['deleted']} and wrote {plural(r['written'], 'view entry', 'view entries')}"
        )
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
    elif report.reindex_interrupted:
        lines.append(f"  result: DIFFERENCES FOUND; a reindex of this store was interrupted: run `cablestore reindex {shlex.quote(str(args.store))}` again to finish it")
    else:
        lines.append(f"  result: DIFFERENCES FOUND; {repair_hint(args)}")
    return "\n".join(lines)



def register(sub) -> None:
    """Add ``export``, ``rebuild`` and ``check`` to the ``cablestore`` parser's subparsers."""
    p = sub.add_parser("export", help="write a Parquet snapshot a Spark cluster (or DuckDB, pandas) can read")
    p.add_argument("store", help="the store directory (read only)")
    p.add_argument("dir", help="where to write the snapshot: a new or empty directory, or a file://, hdfs:// or s3a:// URI")
    p.add_argument("--partitions", type=partitions_int, default=16, help="partitions by hash prefix, 1-256 (default: 16)")
    p.add_argument("--decoded", action="store_true", help="also write the decoded table (type, author, channel, time, text, ...) for data teams")
    p.add_argument(
        "--workers", type=int_at_least(0, MAX_WORKERS), default=None,
        help=f"threads writing partitions, 0 to {MAX_WORKERS} (0: one thread; default: one per core, at most 4)",
    )
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
        p.add_argument("--snapshot", default=None, metavar="SNAPSHOT", help="read an exported snapshot (a directory or URI) instead of exporting one")
        p.add_argument(
            "--no-ship-env",
            action="store_true",
            help="on a cluster, do not ship this Python environment to the executors: they have cablestore installed (PYSPARK_PYTHON)",
        )
        p.add_argument("--partitions", type=partitions_int, default=16, help="partitions / digest buckets, 1-256 (default: 16)")
        p.add_argument("--no-verify-signatures", action="store_true", help="skip Ed25519 checks of stored posts")
        add_output_flags(p)
        p.set_defaults(func=_cmd_rebuild)
