"""``cablestore reindex STORE``: rebuild every derived view from the primary data."""

from __future__ import annotations

import json


def _cmd_reindex(args) -> int:
    from cablestore.progress import Progress
    from cablestore.rebuild.reindex import reindex
    from cablestore.store.store import Store

    with Store(args.store, create=False) as store:
        report = reindex(store, Progress(quiet=args.quiet or args.json))
    data = report.to_dict()
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        faults = f"; {len(report.faults)} faulty records left for `cablestore check STORE --repair`" if report.faults else ""
        print(
            f"reindexed {report.indexed} of {report.posts} posts ({report.tombstones} tombstones) in "
            f"{sum(report.seconds.values()):.1f} s ({report.posts_per_s:,.0f} posts/s): "
            f"dropped {report.dropped} and wrote {report.written} view entries{faults}"
        )
    return 1 if report.faults else 0


def register(sub) -> None:
    """Add the ``reindex`` subcommand to the ``cablestore`` parser's subparsers."""
    from cablestore.cli import add_output_flags

    p = sub.add_parser("reindex", help="rebuild every view of a store from its posts and tombstones (fast, in place)")
    p.add_argument("store", help="the store directory (must exist)")
    add_output_flags(p)
    p.set_defaults(func=_cmd_reindex)
