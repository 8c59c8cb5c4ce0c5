"""``cablestore recover STORE``: LevelDB's repair, then a view repair, and what was kept."""

from __future__ import annotations

import json


def register(sub) -> None:
    """Add the ``recover`` subcommand to the ``cablestore`` parser."""
    from cablestore.cli import add_output_flags

    p = sub.add_parser("recover", help="salvage a damaged store (LevelDB repair + view repair) and report losses")
    p.add_argument("store", help="the store directory")
    add_output_flags(p)
    p.set_defaults(func=_cmd_recover)


def _cmd_recover(args) -> int:
    from cablestore.progress import Progress
    from cablestore.store.recovery import recover

    report = recover(args.store, progress=Progress(quiet=args.quiet or args.json))
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        print(format_recovery(report))
    return 0 if report.lossless and report.consistent else 1


def format_recovery(report) -> str:
    """The human-readable recovery report."""
    lines = [
        f"cablestore recover: {report.path}",
        f"  LevelDB repair: {len(report.set_aside)} replaced files kept in {report.path}/lost/",
        f"  posts: {report.posts_before} readable after LevelDB's repair, {report.posts_after} kept "
        f"({report.known_posts} known to have been stored)",
        f"  tombstones: {report.tombstones_before} readable, {report.tombstones_after} kept",
    ]
    if report.format_restored:
        lines.append("  restored the format key LevelDB's repair had lost")
    if report.deleted_again:
        lines.append(f"  deleted again: {len(report.deleted_again)} deleted posts had come back (their deletion was in a damaged block)")
    if report.view_repair:
        r = report.view_repair
        lines.append(f"  view repair: removed {r['removed_records']} damaged records, deleted {r['deleted']} and wrote {r['written']} view entries")
    for rec in report.removed_records[:10]:
        lines.append(f"      removed {rec['kind']}: {rec['hash']} {rec['detail']}")
    for line in report.damaged[:10]:
        lines.append(f"  DAMAGED (its contents are lost): {line}")
    if report.lost:
        lines.append(f"  LOST {len(report.lost)} posts (fetch them again from a peer):")
        lines += [f"      {h}" for h in report.lost[:20]]
        if len(report.lost) > 20:
            lines.append(f"      ... and {len(report.lost) - 20} more (--json lists all)")
    else:
        lines.append("  lost posts: none known")
    lines.append("  result: " + ("consistent" if report.consistent else "DIFFERENCES REMAIN: run `cablestore check STORE --repair`"))
    return "\n".join(lines)
