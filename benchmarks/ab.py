"""Before/after ratios: the same timing with another commit's cablestore and this tree's, alternating.

    python -m benchmarks.ab --base 280d1bb reindex --posts 100000 --rounds 3
    python -m benchmarks.ab --base 280d1bb ingest --posts 30000 --rounds 2
    python -m benchmarks.ab --base 7115376 trusted --posts 1000000 --rounds 2
    python -m benchmarks.ab --base c612027 instructions --posts 10000

The base commit's ``cablestore``, ``views`` and ``rebuild`` are extracted
with ``git archive`` into a temporary directory and imported from there (the
editable install's finder is removed first), beside the compiled extensions
of the base's own wheel (``pip wheel``, when it builds one), so both sides
run the same timing code on the same machine within minutes of each other.
Each side reports its hot path (compiled or pure Python); a comparison
across different paths is flagged.  ``reindex`` times ``reindex`` on a fresh
copy of a store built by trusted ingest; ``ingest`` times pynacl's raw
verify, then verified and trusted ingest of the posts, in batches of 1,000,
and verified ingest with one verify worker (``ingest_batches`` where the
base has it); ``trusted`` times trusted ingest alone, with the rate of its
last 5% of posts over its first 5% (how flat it stays as the store grows).
Each side runs in a fresh process; the best of the rounds is compared (the
machine is shared: compare ratios).  ``instructions`` counts instead of
timing: each side's trusted ingest runs once under valgrind's callgrind
(``PYTHONHASHSEED=0``), less the same process without the ingest, and
reports the instructions a post of the ingesting thread and of LevelDB's
own threads.  The counts repeat to within ~0.1% whatever else the machine
does, so they decide a small change that wall-clock noise hides (a post's
cache misses and waits are not in them: confirm with ``ingest``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

NOW = 1_900_000_000_000

_PRELUDE = r"""
import sys, json, time, shutil
if sys.argv[1]:
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, sys.argv[1])
try:
    from cablestore.compiled import HOT_PATH
except ImportError:
    HOT_PATH = "pure Python (before the compiled path)"
"""

_REINDEX = _PRELUDE + r"""
from cablestore import Store
from cablestore.rebuild.reindex import reindex
shutil.rmtree(sys.argv[3], ignore_errors=True)
shutil.copytree(sys.argv[2], sys.argv[3])
with Store(sys.argv[3], now=lambda: {NOW}) as s:
    t = time.perf_counter()
    r = reindex(s)
    wall = time.perf_counter() - t
shutil.rmtree(sys.argv[3], ignore_errors=True)
print(json.dumps({"seconds": wall, "posts_per_s": r.posts / wall, "phases": {k: round(v, 2) for k, v in r.seconds.items()}, "hot_path": HOT_PATH}))
""".replace("{NOW}", str(NOW))

_INGEST = _PRELUDE + r"""
from nacl.signing import VerifyKey
from cablestore import Store
from cablestore.authoring.workload import read_posts
bufs = read_posts(sys.argv[2])
t = time.perf_counter()
for b in bufs:
    VerifyKey(b[:32]).verify(b[96:], b[32:96])
out = {"raw_verify_per_s": len(bufs) / (time.perf_counter() - t)}
for name, verify in (("verified", True), ("trusted", False)):
    shutil.rmtree(sys.argv[3], ignore_errors=True)
    with Store(sys.argv[3], verify_signatures=verify, now=lambda: {NOW}) as s:
        t = time.perf_counter()
        for i in range(0, len(bufs), 1000):
            s.ingest_many(bufs[i : i + 1000])
        out[name + "_per_s"] = len(bufs) / (time.perf_counter() - t)
shutil.rmtree(sys.argv[3], ignore_errors=True)
out["verified_over_raw"] = out["verified_per_s"] / out["raw_verify_per_s"]
# One verify thread (or process) beside this one, the next batches verified ahead when the base can.
shutil.rmtree(sys.argv[3], ignore_errors=True)
with Store(sys.argv[3], verify_workers=1, now=lambda: {NOW}) as s:
    batches = [bufs[i : i + 1000] for i in range(0, len(bufs), 1000)]
    t = time.perf_counter()
    if hasattr(s, "ingest_batches"):
        for _ in s.ingest_batches(batches):
            pass
    else:
        for batch in batches:
            s.ingest_many(batch)
    out["workers_per_s"] = len(bufs) / (time.perf_counter() - t)
shutil.rmtree(sys.argv[3], ignore_errors=True)
out["workers_over_raw"] = out["workers_per_s"] / out["raw_verify_per_s"]
out["hot_path"] = HOT_PATH
print(json.dumps(out))
""".replace("{NOW}", str(NOW))

_TRUSTED = _PRELUDE + r"""
from cablestore import Store
from cablestore.authoring.workload import read_posts
bufs = read_posts(sys.argv[2])
shutil.rmtree(sys.argv[3], ignore_errors=True)
with Store(sys.argv[3], verify_signatures=False, now=lambda: {NOW}) as s:
    marks = [(0, time.perf_counter())]  # (posts stored, when)
    for i in range(0, len(bufs), 1000):
        s.ingest_many(bufs[i : i + 1000])
        marks.append((min(i + 1000, len(bufs)), time.perf_counter()))
shutil.rmtree(sys.argv[3], ignore_errors=True)
n, start, end = len(bufs), marks[0][1], marks[-1][1]
share = n / 20  # the first and the last 5% of the posts, to the batch
first = next((done, t) for done, t in marks[1:] if done >= share)
last = next((done, t) for done, t in reversed(marks[:-1]) if n - done >= share)
first_rate = first[0] / (first[1] - start)
last_rate = (n - last[0]) / (end - last[1])
out = {"trusted_per_s": n / (end - start), "last_over_first": last_rate / first_rate, "hot_path": HOT_PATH}
print(json.dumps(out))
""".replace("{NOW}", str(NOW))

_INSTRUCTIONS = _PRELUDE + r"""
from cablestore import Store
from cablestore.authoring.workload import read_posts
bufs = read_posts(sys.argv[2])
shutil.rmtree(sys.argv[3], ignore_errors=True)
with Store(sys.argv[3], verify_signatures=False, now=lambda: {NOW}) as s:
    if sys.argv[4] == "ingest":
        for i in range(0, len(bufs), 1000):
            s.ingest_many(bufs[i : i + 1000])
shutil.rmtree(sys.argv[3], ignore_errors=True)
print(json.dumps({"posts": len(bufs), "hot_path": HOT_PATH}))
""".replace("{NOW}", str(NOW))


def _callgrind(code: str, path: str, source: Path, work: Path, what: str, into: Path) -> tuple[dict, list[int]]:
    """Run ``code`` under callgrind: its printed result and the instructions of each thread (the main one first)."""
    import os

    out = into / f"callgrind-{what}.out"
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    argv = ["valgrind", "--tool=callgrind", "--separate-threads=yes", f"--callgrind-out-file={out}"]
    run = subprocess.run([*argv, sys.executable, "-c", code, path, str(source), str(work), what], capture_output=True, text=True, env=env)
    if run.returncode != 0:
        raise SystemExit(f"benchmarks.ab: callgrind failed: {(run.stderr.strip().splitlines() or ['?'])[-1]}")
    counts = []
    for thread in sorted(into.glob(f"callgrind-{what}.out-*")):
        summary = next(line for line in thread.read_text(errors="replace").splitlines() if line.startswith("summary:"))
        counts.append(int(summary.split()[1]))
        thread.unlink()
    return json.loads(run.stdout.strip().splitlines()[-1]), counts


def _instructions(path: str, source: Path, work: Path, into: Path) -> dict:
    import compileall

    # Bytecode first: compiling a module the ingest imports would count as the ingest's.
    for tree in [Path(path)] if path else [Path(__file__).resolve().parents[1] / name for name in ("cablestore", "views", "rebuild")]:
        compileall.compile_dir(str(tree), quiet=1)
    result, ingest = _callgrind(_INSTRUCTIONS, path, source, work, "ingest", into)
    _, idle = _callgrind(_INSTRUCTIONS, path, source, work, "skip", into)
    n = result["posts"]
    return {
        "ingest_thread_per_post": (ingest[0] - idle[0]) / n,
        "leveldb_threads_per_post": (sum(ingest[1:]) - sum(idle[1:])) / n,
        "hot_path": result["hot_path"],
    }


def extract(base: str, into: Path) -> Path:
    """The base commit's package tree, laid out as installed (``cablestore.views``, ``cablestore.rebuild``)."""
    src = into / "src"
    src.mkdir()
    archive = subprocess.run(["git", "archive", base], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    pkg = into / "pkg"
    shutil.copytree(src / "cablestore", pkg / "cablestore")
    shutil.copytree(src / "views", pkg / "cablestore" / "views")
    shutil.copytree(src / "rebuild", pkg / "cablestore" / "rebuild")
    # The sources as they are (a wheel of some commits lacks a package), with the
    # compiled extensions of the base's own wheel beside them when it builds one.
    wheels = into / "wheels"
    try:
        built = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(src)], capture_output=True, text=True, timeout=900
        )
        failed = built.returncode != 0 and (built.stderr.strip().splitlines() or ["pip wheel failed"])[-1]
    except subprocess.TimeoutExpired:
        failed = "pip wheel timed out"
    found = sorted(wheels.glob("*.whl")) if not failed else []
    if found:
        unpacked = into / "wheel"
        shutil.unpack_archive(str(found[0]), str(unpacked), "zip")
        for ext in (unpacked / "cablestore").glob("*.so"):
            shutil.copy2(ext, pkg / "cablestore" / ext.name)
    else:
        print(f"base: no wheel built ({failed or 'no wheel'}); its sources run as they are", flush=True)
    return pkg


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ab", description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the commit to compare with (e.g. main before a change)")
    parser.add_argument("what", choices=("reindex", "ingest", "trusted", "instructions"))
    parser.add_argument("--posts", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="bench-results", help="directory for posts and stores (reused)")
    args = parser.parse_args(argv)
    if args.posts < 1000:
        parser.error("--posts must be at least one batch (1000)")
    if args.what == "instructions" and shutil.which("valgrind") is None:
        parser.error("instructions: valgrind is not installed (Debian: apt install valgrind)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from .rebuild import build_store
    from .run import posts_for

    posts = out / f"posts-{args.posts}-seed{args.seed}.bin"
    if args.what == "reindex":
        store = build_store(out, args.posts, args.seed)  # built by this tree's code
    else:
        store = None
        posts_for(out, args.posts, args.seed)
    code, source = {"reindex": (_REINDEX, store), "ingest": (_INGEST, posts), "trusted": (_TRUSTED, posts), "instructions": (None, posts)}[args.what]
    results: dict = {"base": [], "this tree": []}
    with tempfile.TemporaryDirectory() as tmp:
        sides = {"base": str(extract(args.base, Path(tmp))), "this tree": ""}
        if args.what == "instructions":  # counts repeat: one run a side
            for side, path in sides.items():
                results[side] = _instructions(path, posts, out / "ab-work.ldb", Path(tmp))
                print(side, json.dumps({k: round(v) if isinstance(v, float) else v for k, v in results[side].items()}), flush=True)
            for key in ("ingest_thread_per_post", "leveldb_threads_per_post"):
                base, this = results["base"][key], results["this tree"][key]
                print(f"{key}: base {base:,.0f}, this tree {this:,.0f}: {this / base:.3f}x")
            return 0
        for _ in range(args.rounds):
            for side, path in sides.items():
                run = subprocess.run([sys.executable, "-c", code, path, str(source), str(out / "ab-work.ldb")], capture_output=True, text=True, check=True)
                result = json.loads(run.stdout)
                results[side].append(result)
                print(side, json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()}), flush=True)
    paths = {side: {r["hot_path"] for r in rs} for side, rs in results.items()}
    if paths["base"] != paths["this tree"]:
        print(f"note: the sides ran different hot paths: {paths}; the ratio compares them too")
    key = "posts_per_s" if args.what == "reindex" else "trusted_per_s"
    best = {side: max(r[key] for r in rs) for side, rs in results.items()}
    print(f"best of {args.rounds}, {key}: base {best['base']:,.0f}, this tree {best['this tree']:,.0f}: {best['this tree'] / best['base']:.2f}x")
    if args.what == "ingest":
        ratio = {side: max(r["verified_over_raw"] for r in rs) for side, rs in results.items()}
        print(f"best verified ingest / raw verify: base {ratio['base']:.2f}, this tree {ratio['this tree']:.2f}")
        ratio = {side: max(r["workers_over_raw"] for r in rs) for side, rs in results.items()}
        print(f"best verified ingest with a verify worker / raw verify: base {ratio['base']:.2f}, this tree {ratio['this tree']:.2f}")
    if args.what == "trusted":
        flat = {side: [round(r["last_over_first"], 2) for r in rs] for side, rs in results.items()}
        print(f"last 5% / first 5% of the ingest: base {flat['base']}, this tree {flat['this tree']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
