"""The salvage run of the corruption harness: ``python -m benchmarks.corrupt --salvage --posts 100000``.

A store of ``posts`` posts (all but the last 2% closed into tables, the
last 2% left in the write-ahead log by a writer killed without closing) is
damaged, one file at a time, then recovered with ``recover``:

* every table is cut at ``points`` places (5,000 bytes off its end, and at
  evenly spaced offsets); a byte is flipped in a data block of each table,
  in the index block and in the footer of the largest; the log is flipped
  and cut; the MANIFEST is flipped and cut; CURRENT is removed;
* each recovered store must hold every post whose bytes survive intact in
  some file (a table block, or a log record, untouched by the damage), no
  post that was never offered, and be consistent (``check``); a second
  ``recover`` must find it intact and add nothing to ``lost/``.

The truncation sweep cuts the table holding the most posts at every
``step`` bytes (4 KiB): the reader reads the blocks before a cut exactly as
it reads them in the whole file (one block-by-block read of the whole
table, compared with its index, checks that once), so each cut reads from
the last whole block on, and every post of that block must be found, and
no post that is not in the table.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cablestore import Store
from cablestore.authoring.workload import generate
from cablestore.recovery.leveldb import log as leveldb_log
from cablestore.recovery.leveldb import tables as reader
from cablestore.recovery.recovering import recover
from cablestore.wire.codec import post_hash

NOW = 1_900_000_000_000
POSTS = b"!post!"
ROOT = Path(__file__).resolve().parent.parent
CRASH = """
import os, sys
from cablestore import Store
from cablestore.authoring.workload import generate
posts = generate(seed={seed}, posts={posts})[{first}:]
store = Store(sys.argv[1], now=lambda: {now}, verify_signatures=False)
for i in range(0, len(posts), 4):
    store.ingest_many(posts[i : i + 4])
os._exit(0)
"""


def build(path: Path, posts: int, seed: int) -> tuple[set[bytes], set[bytes]]:
    """The damaged stores' template; ``(offered, stored)`` post hashes."""
    bufs = generate(seed=seed, posts=posts)
    first = posts - max(100, posts // 50)
    with Store(path, now=lambda: NOW, verify_signatures=False) as store:
        for i in range(0, first, 1000):
            store.ingest_many(bufs[i : min(i + 1000, first)])
        store.db.compact_range()  # settled: the writer killed below is not in the middle of a compaction
    code = CRASH.format(seed=seed, posts=posts, first=first, now=NOW)
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=3600, cwd=ROOT)
    ref = path.with_name(path.name + "-ref")
    shutil.rmtree(ref, ignore_errors=True)
    shutil.copytree(path, ref)
    stored = _posts(ref)
    shutil.rmtree(ref)
    return {post_hash(b) for b in bufs}, stored


def _posts(path: Path) -> set[bytes]:
    with Store(path, create=False, verify_signatures=False) as store:
        return {k[len(POSTS) :] for k, _ in store.items(POSTS)}


def units(path: Path, stored: set[bytes]) -> dict[str, list[tuple[int, int, set[bytes]]]]:
    """Per file, ``(start, end, post hashes)`` of each part that holds posts: table blocks with their trailer, log puts."""
    out: dict[str, list] = {}
    for f in sorted(path.iterdir()):
        data = f.read_bytes() if f.suffix in (".ldb", ".log") else b""
        if f.suffix == ".ldb" and reader.index(data) is not None:
            ends = {start: start + size + reader.TRAILER for _, start, size in reader.index(data)}
            found: dict[int, set] = {}
            for r in reader.read_table(data, f.name, (POSTS,)).records:
                if r.kind == reader.VALUE:
                    found.setdefault(int(r.source.split("@")[1]), set()).add(r.key[len(POSTS) :])
            out[f.name] = [(start, ends[start], hs) for start, hs in sorted(found.items())]
        elif f.suffix == ".log" and data:
            parts = []
            for r in leveldb_log.read_log(data, f.name, (POSTS,)).records:
                at = data.find(r.value) if r.kind == reader.VALUE else -1
                if at >= 0:  # the put's key, its length and the value, verbatim
                    parts.append((at - len(POSTS) - 32 - 5, at + len(r.value), {r.key[len(POSTS) :]}))
            out[f.name] = parts
    return out


def survivors(parts: dict, damaged: dict[str, list[tuple[int, float]]], stored: set[bytes]) -> set[bytes]:
    """Posts of the store held by some part no damage touches."""
    out = set()
    for name, items in parts.items():
        hits = damaged.get(name, [])
        for start, end, hashes in items:
            if not any(a < end and start < b for a, b in hits):
                out |= hashes
    return out & stored


def _damages(template: Path, parts: dict, points: int) -> list[tuple[str, str, list]]:
    """``(description, file, [(from, to)])``: the damage each trial does (done by :func:`_apply`)."""
    out = []
    tables = sorted(template.glob("*.ldb"), key=lambda f: -f.stat().st_size)
    for t in tables:
        size = t.stat().st_size
        cuts = [size - 5000] + [size * k // (points + 1) // 4096 * 4096 for k in range(1, points)]
        out += [(f"cut {t.name} at {c}", t.name, [(c, float("inf"))]) for c in cuts]
        blocks = parts.get(t.name) or [(0, 100, set())]
        mid = blocks[len(blocks) // 2]
        out.append((f"flip a byte of a data block of {t.name}", t.name, [((mid[0] + mid[1]) // 2, (mid[0] + mid[1]) // 2 + 1)]))
    big = tables[0]
    data = big.read_bytes()
    footer = len(data) - reader.FOOTER
    _, _, pos = reader.handle(data, footer, footer + 40)
    index, size, _ = reader.handle(data, pos, footer + 40)
    out.append((f"flip a byte of the index of {big.name}", big.name, [(index + size // 2, index + size // 2 + 1)]))
    out.append((f"flip a byte of the footer of {big.name}", big.name, [(footer + 2, footer + 3)]))
    for log in template.glob("*.log"):
        n = log.stat().st_size
        if n:
            out.append((f"flip a byte of {log.name}", log.name, [(n // 3, n // 3 + 1)]))
            out.append((f"cut {log.name} at {n * 2 // 3}", log.name, [(n * 2 // 3, float("inf"))]))
    manifest = next(template.glob("MANIFEST-*"))
    out.append((f"flip a byte of {manifest.name}", manifest.name, [(40, 41)]))
    out.append((f"cut {manifest.name} at 60", manifest.name, [(60, float("inf"))]))
    out.append(("remove CURRENT", "CURRENT", []))
    return out


def _apply(store: Path, name: str, ranges: list) -> None:
    f = store / name
    if not ranges:
        f.unlink()
        return
    data = bytearray(f.read_bytes())
    for a, b in ranges:
        if b == float("inf"):
            del data[a:]
        else:
            for i in range(a, b):
                data[i] ^= 0x5A
    f.write_bytes(bytes(data))


def _lost_listing(store: Path) -> list[str]:
    lost = store / "lost"
    return sorted(str(f.relative_to(lost)) for f in lost.rglob("*")) if lost.exists() else []


def trial(template: Path, work: Path, damage: tuple, parts: dict, offered: set, stored: set) -> dict:
    what, name, ranges = damage
    store = work / "trial"
    shutil.rmtree(store, ignore_errors=True)
    shutil.copytree(template, store)
    _apply(store, name, ranges)
    want = survivors(parts, {name: ranges}, stored)
    start = time.perf_counter()
    report = recover(store)
    seconds = time.perf_counter() - start
    after = _posts(store)
    listing = _lost_listing(store)
    again = recover(store)  # checks the views again (it must find them consistent) and must change nothing
    consistent = again.consistent and not again.view_repair
    problems = []
    if want - after:
        problems.append(f"{len(want - after)} surviving posts missing, e.g. {next(iter(want - after)).hex()}")
    if after - offered:
        problems.append(f"{len(after - offered)} posts never offered")
    if not (consistent and report.consistent):
        problems.append("inconsistent")
    if not again.intact or _lost_listing(store) != listing:
        problems.append("a second recover changed the store")
    return {
        "damage": what,
        "seconds": round(seconds, 1),
        "survivors": len(want),
        "kept": len(after & stored),
        "salvaged": len(report.salvaged_posts),
        "deleted_back": len(after - stored),
        "lost_named": len(report.lost),
        "problems": problems,
    }


def sweep(template: Path, parts: dict, offered: set, step: int) -> dict:
    """Cut the table holding the most posts at every ``step`` bytes (see the module's doc)."""
    name = max(parts, key=lambda n: sum(len(h) for *_, h in parts[n]) if n.endswith(".ldb") else -1)
    data = (template / name).read_bytes()
    handles = reader.index(data)
    blocks = [(start, start + size + reader.TRAILER) for _, start, size in handles]
    in_table = set().union(*(h for *_, h in parts[name]))
    by_block = {start: h for start, _, h in parts[name]}
    failures = []
    whole = reader.read_table(data[: -reader.FOOTER], name, (POSTS,))  # block by block, all of it
    if {r.key[len(POSTS) :] for r in whole.records if r.kind == reader.VALUE} != in_table or not all(r.certified for r in whole.records):
        failures.append("the block-by-block read of the whole table differs from its index")
    start_time = time.perf_counter()
    cuts = list(range(step, len(data), step))
    for cut in cuts:
        done = [b for b in blocks if b[1] <= cut]
        resume = done[-1][0] if done else 0
        scan = reader.read_blocks(data[:cut], name, (POSTS,), resume)
        found = {r.key[len(POSTS) :] for r in scan.records if r.kind == reader.VALUE}
        want = by_block.get(resume, set()) if done else set()
        if want - found:
            failures.append(f"cut at {cut}: {len(want - found)} posts of the last whole block not found")
        if found - in_table or found - offered:
            failures.append(f"cut at {cut}: {len(found - in_table)} posts not in the table")
    return {"table": name, "bytes": len(data), "cuts": len(cuts), "step": step, "seconds": round(time.perf_counter() - start_time, 1), "failures": failures[:20]}


def run_salvage(posts: int = 100_000, seed: int = 1, workdir=None, step: int = 4096, points: int = 4, log=print) -> dict:
    """Build the template, sweep the truncations of one table, run every damage trial; the figures."""
    work = Path(workdir or tempfile.mkdtemp(prefix="cablestore-salvage-"))
    template = work / "template"
    shutil.rmtree(template, ignore_errors=True)
    started = time.perf_counter()
    offered, stored = build(template, posts, seed)
    parts = units(template, stored)
    swept = sweep(template, parts, offered, step)
    log(json.dumps({"sweep": swept}))
    trials = []
    for damage in _damages(template, parts, points):
        result = trial(template, work, damage, parts, offered, stored)
        log(json.dumps(result))
        trials.append(result)
    shutil.rmtree(work / "trial", ignore_errors=True)
    failures = [t for t in trials if t["problems"]] + ([swept] if swept["failures"] else [])
    result = {
        "posts": len(stored),
        "files": {f.name: f.stat().st_size for f in sorted(template.iterdir()) if f.is_file()},
        "sweep": swept,
        "trials": len(trials),
        "survivors_kept": sum(t["survivors"] for t in trials if not t["problems"]),
        "salvaged_beyond_leveldb": sum(t["salvaged"] for t in trials),
        "failure_count": len(failures),
        "failures": failures[:20],
        "seconds": round(time.perf_counter() - started, 1),
    }
    log(json.dumps({k: v for k, v in result.items() if k != "sweep"}, indent=2))
    return result
