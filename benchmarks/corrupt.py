"""Corruption harness: damage a closed store's files, then open, check, repair, recover.

    python -m benchmarks.corrupt --trials 500
    python -m benchmarks.corrupt --salvage --posts 100000

The salvage run (:func:`run_salvage`, in ``benchmarks/salvage_run.py``)
truncates each table at many points, every 4 KiB boundary of the table
holding the most posts included, and flips bytes in blocks, the log and
the MANIFEST, then runs ``recover``: every post whose bytes survive intact
in some file must be in the recovered store, no post that was never offered
may appear, and ``check`` must be consistent.

Each trial copies a template store (posts in .ldb tables and in the .log),
damages one of its table, log or MANIFEST files (random bit flips, zeroed
bytes, or a truncation), then does what a user would: open it and run
``check``; on differences ``check --repair``; on a CableError
``cablestore recover``.  Every outcome must be a clear CableError or a
consistent store, and every acknowledged post that is gone must have been
reported (by the check's removed records or by recover's ``lost`` list):
a raw exception, an inconsistent end state or a silent loss is a failure
(exit status 1).  The test suite runs a short version
(tests/test_corruption.py).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

from cablestore import Store
from cablestore.authoring.workload import generate
from cablestore.errors import CableError
from cablestore.recovery.recovering import recover

NOW = 1_900_000_000_000
DAMAGEABLE = ("*.ldb", "*.log", "MANIFEST-*")


def build_template(path: Path, posts: int, seed: int) -> set[bytes]:
    """A store with older posts compacted into tables and newer ones in the log; its post hashes."""
    bufs = generate(seed=seed, posts=posts)
    rng = random.Random(seed)
    with Store(path, now=lambda: NOW, verify_signatures=False) as store:
        i = 0
        while i < len(bufs):
            n = rng.choice((1, 5, 20, 60))
            store.ingest_many(bufs[i : i + n])
            i += n
            if i >= len(bufs) * 2 // 3 and not list(path.glob("*.ldb")):
                store.db.compact_range()
        return {k[len(b"!post!") :] for k, _ in store.items(b"!post!")}


def damage(path: Path, rng: random.Random) -> str:
    """Damage one file of a closed store; return what was done."""
    files = sorted(f for pattern in DAMAGEABLE for f in path.glob(pattern))
    target = rng.choice(files)
    data = bytearray(target.read_bytes())
    op = rng.choice(("flip", "flip", "flip", "zero", "truncate"))
    if op == "truncate" or not data:
        cut = rng.randrange(len(data)) if data else 0
        del data[cut:]
        what = f"truncate {target.name} at {cut}"
    elif op == "zero":
        at = rng.randrange(len(data))
        n = rng.randrange(1, 65)
        data[at : at + n] = bytes(len(data[at : at + n]))
        what = f"zero {n} bytes of {target.name} at {at}"
    else:
        spots = [rng.randrange(len(data)) for _ in range(rng.choice((1, 1, 2, 8)))]
        for at in spots:
            data[at] ^= 1 << rng.randrange(8)
        what = f"flip {len(spots)} bits of {target.name} at {spots}"
    target.write_bytes(bytes(data))
    return what


def trial(path: Path, expected: set[bytes]) -> tuple[str, str | None, dict]:
    """Open, check, repair or recover a damaged store: ``(outcome, problem or None, details)``."""
    reported: set[bytes] = set()
    details: dict = {}
    try:
        try:
            with Store(path, create=False) as store:
                report = store.check(check_signatures=False)
                outcome = "unaffected"
                if not report.consistent:
                    repaired = store.check(fix=True, check_signatures=False)
                    reported |= {f.hash for f in report.faults}
                    outcome = "check --repair"
                    if not repaired.consistent:
                        return outcome, "inconsistent after check --repair", details
        except CableError as exc:
            outcome = f"{type(exc).__name__} -> recover"
            details["error"] = str(exc)[:200]
            rec = recover(path)
            reported |= {bytes.fromhex(h) for h in rec.lost} | {bytes.fromhex(r["hash"]) for r in rec.removed_records}
            details["lost_reported"] = len(rec.lost)
            details["damaged_reported"] = bool(rec.damaged)
            if not rec.consistent:
                return outcome, "inconsistent after recover", details
        with Store(path, create=False) as store:
            final = {k[len(b"!post!") :] for k, _ in store.items(b"!post!")}
            if not store.check(check_signatures=False).consistent:
                return outcome, "inconsistent at the end", details
    except CableError as exc:
        return f"{type(exc).__name__} after recovery", None, {"error": str(exc)[:200]}
    except Exception:  # noqa: BLE001 - what this harness hunts for
        return "raw exception", traceback.format_exc(limit=4)[-1500:], details
    missing = expected - final
    details["missing"] = len(missing)
    details["resurrected"] = len(final - expected)
    silent = missing - reported
    if silent and details.get("damaged_reported"):
        return outcome + " (losses reported by file)", None, details
    if silent:
        return outcome, f"silent loss of {len(silent)} posts (e.g. {next(iter(silent)).hex()})", details
    if missing:
        outcome += " (losses reported)"
    return outcome, None, details


def run(trials: int, posts: int = 600, seed: int = 1, workdir=None, log=print) -> dict:
    work = Path(workdir or tempfile.mkdtemp(prefix="cablestore-corrupt-"))
    template = work / "template"
    shutil.rmtree(template, ignore_errors=True)
    expected = build_template(template, posts, seed)
    rng = random.Random(seed)
    outcomes: Counter = Counter()
    failures, lost_reported, resurrected = [], 0, 0
    start = time.perf_counter()
    for n in range(trials):
        store = work / "trial"
        shutil.rmtree(store, ignore_errors=True)
        shutil.copytree(template, store)
        what = damage(store, rng)
        outcome, problem, details = trial(store, expected)
        outcomes[outcome] += 1
        lost_reported += details.get("missing", 0)
        resurrected += details.get("resurrected", 0)
        if problem:
            failures.append({"trial": n, "damage": what, "outcome": outcome, "problem": problem})
    shutil.rmtree(work / "trial", ignore_errors=True)
    result = {
        "trials": trials,
        "posts": len(expected),
        "seconds": round(time.perf_counter() - start, 1),
        "outcomes": dict(outcomes.most_common()),
        "failure_count": len(failures),
        "failures": failures[:20],
        "posts_lost_and_reported": lost_reported,
        "deleted_posts_back": resurrected,
    }
    log(json.dumps(result, indent=2))
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.corrupt", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--posts", type=int, default=600)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--salvage", action="store_true", help="the salvage run: truncations and flips of every file, then recover")
    parser.add_argument("--step", type=int, default=4096, help="salvage run: the truncation sweep's step in bytes")
    parser.add_argument("--points", type=int, default=4, help="salvage run: the places each table is cut (5,000 bytes off its end, then evenly spaced)")
    args = parser.parse_args(argv)
    if args.salvage:
        from benchmarks.salvage_run import run_salvage

        return 1 if run_salvage(args.posts, args.seed, args.dir, step=args.step, points=args.points)["failure_count"] else 0
    return 1 if run(args.trials, args.posts, args.seed, args.dir)["failure_count"] else 0


if __name__ == "__main__":
    sys.exit(main())
