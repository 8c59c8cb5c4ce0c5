"""Commands that make stores and posts and put posts in a store: ``demo``, ``init``, ``generate``, ``ingest``."""

from __future__ import annotations

from cablestore.cli.args import MAX_BATCH, MAX_CACHE_MB, MAX_POSTS, MAX_WORKERS, add_local_user_flag, add_output_flags, client_path, int_at_least, open_store, print_json
from cablestore.progress import plural


def _cmd_demo(args) -> int:
    from cablestore.demo import run_demo

    report = run_demo(args.dir, posts=args.posts, seed=args.seed, quiet=args.quiet or args.json, engine=args.engine)
    if args.json:
        print_json(report)
    return 0 if report["ok"] else 1


def _cmd_init(args) -> int:
    from pathlib import Path

    from cablestore.errors import StoreExistsError
    from cablestore.store.lifecycle.opening import Kind, classify
    from cablestore.store.store import Store

    kind = classify(Path(args.store))
    if kind not in (Kind.MISSING, Kind.EMPTY):  # only a new store: never one that holds data, nor anything else
        what = {Kind.STORE: "already a store", Kind.FILE: "a file", Kind.SNAPSHOT: "an exported snapshot"}.get(kind, "a directory that is not empty")
        raise StoreExistsError(f"{args.store} is {what}; nothing was changed (init makes a store at a missing path or in an empty directory)")
    with Store(args.store, local_user=args.local_user) as store:
        local_user = store.local_user
    if args.json:
        print_json({"store": args.store, "created": True, "local_user": local_user.hex() if local_user else None})
    else:
        print(f"created an empty store at {args.store}")
        print(f"next: cablestore post {args.store} --key KEYFILE text general hello  (or cablestore serve {args.store}, cablestore sync {args.store} --connect HOST:PORT)")
    return 0


def _cmd_generate(args) -> int:
    import os

    from cablestore.authoring.workload import Workload, write_posts
    from cablestore.errors import ArgumentError
    from cablestore.progress import Progress

    if os.path.lexists(args.out) and not args.force:
        raise ArgumentError(f"{args.out} exists: generate never overwrites a file (give another path, or --force)")
    progress = Progress(quiet=args.quiet).stage("generate + sign", args.posts)

    def counted():
        for buf in Workload(args.seed, args.posts):
            progress.advance()
            yield buf

    n = write_posts(args.out, counted())
    progress.done()
    summary = {"posts": n, "seed": args.seed, "out": str(args.out)}
    print_json(summary) if args.json else print(f"wrote {plural(n, 'post')} (seed {args.seed}) to {args.out}")
    return 0


def _cmd_ingest(args) -> int:
    from cablestore.authoring.workload import read_posts
    from cablestore.progress import Progress
    bufs = [buf for path in args.files for buf in read_posts(client_path(path))]
    progress = Progress(quiet=args.quiet).stage("ingest", len(bufs))
    refused: dict[str, int] = {}
    new = 0
    sizes = {} if args.cache_mb is None else {"cache_mb": args.cache_mb}
    with open_store(  # run through serve: the store it holds, with its own options
        args.store, sync=args.sync, verify_signatures=not args.no_verify_signatures, verify_workers=args.workers, local_user=args.local_user, **sizes
    ) as store:
        # ingest_batches: the workers verify the next batches while this one is indexed.
        for results in store.ingest_batches(bufs[i : i + args.batch] for i in range(0, len(bufs), args.batch)):
            for r in results:
                if r.ok:
                    new += r.new
                else:
                    refused[type(r.error).__name__] = refused.get(type(r.error).__name__, 0) + 1
            progress.advance(len(results))
    progress.done()
    accepted = len(bufs) - sum(refused.values())
    summary = {"read": len(bufs), "accepted": accepted, "new": new, "already_stored": accepted - new, "refused": refused}
    print_json(summary) if args.json else print(format_ingest(summary, args))
    return 0


def format_ingest(summary: dict, args) -> str:
    """The ingest summary as lines: new, already stored, refused by reason."""
    files = len(args.files)
    lines = [
        f"read {plural(summary['read'], 'post')} from {plural(files, 'file')} into {args.store}",
        f"  new:            {summary['new']}",
        f"  already stored: {summary['already_stored']}",
        f"  refused:        {sum(summary['refused'].values())}",
    ]
    lines += [f"    {reason}: {n}" for reason, n in sorted(summary["refused"].items(), key=lambda kv: (-kv[1], kv[0]))]
    return "\n".join(lines)



def register(sub) -> None:
    """Add ``demo``, ``init``, ``generate`` and ``ingest`` to the ``cablestore`` parser's subparsers."""
    p = sub.add_parser("demo", help="build a sample store, show its answers, verify it (on Spark where Java 17+ is found)")
    p.add_argument("--dir", default=None, help="where to build the store (default: a temporary directory)")
    p.add_argument("--posts", type=int_at_least(1, MAX_POSTS), default=2000, help=f"posts to generate, 1 to {MAX_POSTS:,} (default: 2000)")
    p.add_argument("--seed", type=int, default=1, help="workload seed (default: 1)")
    p.add_argument("--engine", choices=("auto", "spark", "local"), default="auto",
                   help="rebuild engine (default: auto: spark where Java 17+ is found, else local, said in one line)")
    add_output_flags(p)
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser(
        "init", help="create a new, empty store (a path that exists and is not an empty directory is refused)",
        description="Create a new, empty store at STORE: a missing path or an empty directory. Anything else is refused with exit 2 and left "
                    "unchanged (a store, a file, a directory holding files). post, ingest and sync also create a missing store; serve needs one.",
    )
    p.add_argument("store", help="where to create the store (missing, or an empty directory)")
    add_local_user_flag(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=_cmd_init)

    p = sub.add_parser("generate", help="write a deterministic workload of signed posts to a file")
    p.add_argument("--seed", type=int, default=1, help="workload seed: the same seed gives the same bytes (default: 1)")
    p.add_argument("--posts", type=int_at_least(1, MAX_POSTS), default=1000, help=f"posts to generate, 1 to {MAX_POSTS:,} (default: 1000)")
    p.add_argument("out", help="output file ([u32 big-endian length][post] records); an existing file is refused")
    p.add_argument("--force", action="store_true", help="overwrite OUT if it exists (never do this to a key file)")
    add_output_flags(p)
    p.set_defaults(func=_cmd_generate)

    p = sub.add_parser("ingest", help="ingest posts files into a store (created if missing)")
    p.add_argument("store", help="the store directory (created if missing)")
    add_local_user_flag(p)
    p.add_argument("files", nargs="+", help="posts files ([u32 big-endian length][post] records)")
    p.add_argument("--batch", type=int_at_least(1, MAX_BATCH), default=1000, help=f"posts per WriteBatch, 1 to {MAX_BATCH:,} (default: 1000)")
    p.add_argument("--sync", action="store_true", help="sync every batch to disk")
    p.add_argument("--workers", type=int_at_least(0, MAX_WORKERS), default=1,
                   help=f"workers verifying signatures while this thread indexes, 0 to {MAX_WORKERS}: 0 verifies in this one thread; "
                        "N: N threads with the compiled hot path, else N worker processes (1: in this process) (default: 1)")
    p.add_argument("--no-verify-signatures", action="store_true", help="trust signatures (re-indexing only)")
    p.add_argument("--cache-mb", type=int_at_least(0, MAX_CACHE_MB), default=None,
                   help="LevelDB block cache in MB, 0 to 65536 (default: 128; a bulk load of a large store runs faster with 256)")
    add_output_flags(p)
    p.set_defaults(func=_cmd_ingest)
