"""Maintenance of a store in place: ``reindex`` (every view rebuilt from the primary data), ``migrate`` (an older keyspace format upgraded)
and ``recover`` (LevelDB's repair, then a view repair, and what was kept)."""

from __future__ import annotations

from cablestore.cli.args import add_output_flags, describe_lost_post, print_json
from cablestore.progress import plural


def register(sub) -> None:
    """Add ``recover``, ``reindex`` and ``migrate`` to the ``cablestore`` parser's subparsers."""
    p = sub.add_parser("recover", help="salvage a damaged store (every provable post, LevelDB repair, view repair) and report losses; originals kept in STORE/lost/")
    p.add_argument("store", help="the store directory")
    add_output_flags(p)
    p.set_defaults(func=_cmd_recover)

    p = sub.add_parser("reindex", help="rebuild every view of a store from its posts and tombstones (fast, in place)")
    p.add_argument("store", help="the store directory (must exist)")
    add_output_flags(p)
    p.set_defaults(func=_cmd_reindex)

    p = sub.add_parser("migrate", help="upgrade a store of an older keyspace format (cablestore-1, cablestore-2) to the current one, in place; resumable")
    p.add_argument("store", help="the store directory (must exist; not open elsewhere)")
    add_output_flags(p)
    p.set_defaults(func=_cmd_migrate)


def _cmd_recover(args) -> int:
    from cablestore.progress import Progress
    from cablestore.recovery.recovering import recover

    report = recover(args.store, progress=Progress(quiet=args.quiet or args.json))
    if args.json:
        print_json(report.to_dict())
    else:
        print(format_recovery(report))
    return 0 if report.lossless and report.consistent else 1


def format_recovery(report) -> str:
    """The human-readable recovery report."""
    lines = [f"cablestore recover: {report.path}"]
    damaged_files = [f for f in report.files if (f["damaged"] or f["mode"] == "blocks") and not f["leftover"]]
    if report.intact:
        lines.append(f"  files: all {len(report.files)} tables and logs check; nothing repaired, nothing moved")
    else:
        lines.append(f"  files: {plural(len(report.files), 'table or log', 'tables and logs')} read, {len(damaged_files)} damaged; originals kept in {report.originals}")
        for f in damaged_files[:10]:
            how = "read block by block" if f["mode"] == "blocks" else f"{plural(f['units'], 'part')} checked"
            lines.append(f"      {f['file']}: {how}, {plural(len(f['damaged']), 'damaged part')}, {plural(f['posts'], 'post')} found")
        lines.append(
            f"  posts: {report.posts_before} kept by LevelDB's repair, {len(report.salvaged_posts)} more salvaged "
            f"(hash and signature proven), {report.posts_after} kept ({report.known_posts} known to have been stored)"
        )
        lines.append(f"  tombstones: {report.tombstones_before} kept by LevelDB's repair, {report.salvaged_tombstones} more salvaged, {report.tombstones_after} kept")
        if report.salvaged_rows:
            lines.append(f"  local rows salvaged: {report.salvaged_rows}")
        if report.deleted_later:
            lines.append(f"  kept out: {plural(len(report.deleted_later), 'record')} LevelDB's repair brought back that were deleted later")
        if report.unproven:
            lines.append(f"  unproven: {plural(report.unproven, 'record')} not taken, kept in {report.quarantine}")
    if report.intact:
        if report.salvaged_posts:
            lines.append(f"  salvaged: {plural(len(report.salvaged_posts), 'post')} of a write cut short at the end of a log (hash and signature proven)")
        lines.append(f"  posts: {report.posts_after}, tombstones: {report.tombstones_after}")
    if report.format_restored:
        lines.append("  restored the format key LevelDB's repair had lost")
    if report.migrated:
        lines.append("  migrated: a format-1 store, its views rewritten in the current format (as `cablestore migrate` does)")
    if report.deleted_again:
        lines.append(f"  deleted again: {plural(len(report.deleted_again), 'deleted post')} had come back (their deletion was in a damaged block)")
    if report.view_repair:
        r = report.view_repair
        lines.append(
            f"  view repair: removed {plural(r['removed_records'], 'damaged record')}, deleted {r['deleted']} and wrote {plural(r['written'], 'view entry', 'view entries')}"
        )
    for rec in report.removed_records[:10]:
        lines.append(f"      removed {rec['kind']}: {rec['hash']} {rec['detail']}")
    if report.lost_posts:
        lines.append(f"  LOST {plural(len(report.lost_posts), 'post')} (sync from a peer to bring them back):")
        lines += [f"      {describe_lost_post(p)}" for p in report.lost_posts[:20]]
        if len(report.lost_posts) > 20:
            lines.append(f"      ... and {len(report.lost_posts) - 20} more (--json lists all)")
        if report.lost_file:
            lines.append(f"  this run's lost posts, in full: {report.lost_file}")
    else:
        lines.append("  lost posts: none known")
    if report.damaged and not report.lost:
        lines.append(f"  damaged parts of files: {len(report.damaged)} (posts only they held cannot be named; --json lists them)")
    lines.append("  result: " + ("consistent" if report.consistent else "DIFFERENCES REMAIN: run `cablestore check STORE --repair`"))
    return "\n".join(lines)


def _cmd_reindex(args) -> int:
    from cablestore.progress import Progress
    from cablestore.rebuild.reindex import reindex
    from cablestore.store.store import Store

    with Store(args.store, create=False) as store:
        report = reindex(store, Progress(quiet=args.quiet or args.json))
    data = report.to_dict()
    if args.json:
        print_json(data)
    else:
        faults = f"; {plural(len(report.faults), 'faulty record')} left for `cablestore check STORE --repair`" if report.faults else ""
        print(
            f"reindexed {report.indexed} of {plural(report.posts, 'post')} ({plural(report.tombstones, 'tombstone')}) in "
            f"{sum(report.seconds.values()):.1f} s ({report.posts_per_s:,.0f} posts/s): "
            f"dropped {report.dropped} and wrote {plural(report.written, 'view entry', 'view entries')}{faults}"
        )
    return 1 if report.faults else 0


def _cmd_migrate(args) -> int:
    from cablestore.progress import Progress
    from cablestore.rebuild.migration import migrate

    report = migrate(args.store, Progress(quiet=args.quiet or args.json))
    if args.json:
        print_json(report.to_dict())
    elif not report.migrated:
        print(f"{report.path} is in format {report.to_format} already: nothing to migrate")
    else:
        faults = f"; {plural(len(report.faults), 'faulty record')} left for `cablestore check STORE --repair`" if report.faults else ""
        print(
            f"migrated {report.path} from {report.from_format} to {report.to_format}{' (resumed)' if report.resumed else ''}: "
            f"{plural(report.posts, 'post')} in {report.seconds:.1f} s, dropped {report.dropped} and wrote {plural(report.written, 'view entry', 'view entries')}{faults}"
        )
    return 1 if report.faults else 0
