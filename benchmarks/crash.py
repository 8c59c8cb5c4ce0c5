"""Crash consistency: ingest in a child process, SIGKILL it at random moments.

    python -m benchmarks.crash --kills 200 --posts 20000
    python -m benchmarks.crash --repair --kills 50 --posts 20000
    python -m benchmarks.crash --migrate

After every kill the store is reopened and checked with the in-process
rebuild: no partial ingest (every derived view equals the recomputation) and
every post the child acknowledged (``ingest`` or ``ingest_many`` returned) is
present, unless a delete in the workload targets it.  At the end the child
finishes the workload and the store must equal, byte for byte, a store that
ingested the same posts without interruption.  The test suite runs a short
version (tests/test_crash.py).

With ``--repair`` the child is ``cablestore check STORE --repair`` on a store
whose views were damaged: after every kill the store holds exactly the
damaged contents or exactly the repaired ones, never a mix, and repairing
again finishes the job.

With ``--migrate`` the child is ``Store.migrate`` of the format-1 fixture store
(tests/data/format1-store.tar.gz), killed at each of its phases in turn:
after every kill the store is still in format ``cablestore-1`` (every open
refuses it), and migrating again gives exactly the store an uninterrupted
migration gives.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import blake3

from cablestore import DELETE, Store, decode_post, post_hash
from cablestore.authoring.workload import Workload, read_posts, write_posts
from cablestore.keyspace.keys import CHECKED
from cablestore.store.lifecycle import opening

NOW = 1_900_000_000_000


def child(store_path: str, posts_file: str, ack_file: str, seed: int, pause: bool = True) -> None:
    """Ingest from where the acknowledgements stop, in random batch sizes, forever.

    ``pause=False`` (the run that finishes the workload, which no kill interrupts)
    skips the pauses between batches; the batches are the same.
    """
    bufs = read_posts(posts_file)
    acked = _acked(Path(ack_file))
    start = max(acked) + 1 if acked else 0
    rng = random.Random(seed)
    sync = rng.random() < 0.5  # both durability modes survive a process kill
    with Store(store_path, now=lambda: NOW, sync=sync) as store, open(ack_file, "a") as ack:
        i = start
        while i < len(bufs):
            n = rng.choice((1, 1, 2, 7, 50, 200))
            chunk = bufs[i : i + n]
            if n == 1:
                try:
                    store.ingest(chunk[0])
                except Exception:  # a deleted post coming back: refused, still "handled"
                    pass
            else:
                store.ingest_many(chunk)
            # the acknowledgement: written only after the store call returned
            ack.write(f"{i + len(chunk) - 1}\n")
            ack.flush()
            i += len(chunk)
            delay = rng.random() / 50  # drawn either way: the same batches with or without the pauses
            if pause:
                time.sleep(delay)  # posts arrive from the network, not all at once
    Path(ack_file + ".done").touch()


def _acked(path: Path) -> list[int]:
    if not path.exists():
        return []
    return [int(line) for line in path.read_text().split() if line.strip()]


def run(kills: int, posts: int, seed: int = 1, workdir=None, log=print) -> dict:
    work = Path(workdir or tempfile.mkdtemp(prefix="cablestore-crash-"))
    work.mkdir(parents=True, exist_ok=True)
    posts_file, store_path, ack_file = work / "posts.bin", work / "store", work / "acks"
    write_posts(posts_file, Workload(seed, posts))
    bufs = read_posts(posts_file)
    targeted = {h for b in bufs if (p := decode_post(b)).post_type == DELETE for h in p.hashes}
    rng = random.Random(seed)
    stats = {"kills": 0, "checks": 0, "acked_max": -1, "posts": posts}
    cmd = [sys.executable, "-m", "benchmarks.crash", "--child", str(store_path), str(posts_file), str(ack_file)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")])}
    while stats["kills"] < kills and not Path(str(ack_file) + ".done").exists():
        proc = subprocess.Popen(cmd + [str(rng.randrange(1 << 30))], env=env)
        time.sleep(rng.uniform(0.15, 0.5))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            stats["kills"] += 1
        proc.wait()
        _check(store_path, bufs, _acked(ack_file), targeted, stats)
    subprocess.run(cmd + ["0", "--no-pause"], env=env, check=True)  # finish the workload: no kill comes, so no pauses
    _check(store_path, bufs, _acked(ack_file), targeted, stats)
    with Store(store_path, now=lambda: NOW) as crashed, Store(work / "clean", now=lambda: NOW) as clean:
        clean.ingest_many(bufs)
        stats["identical_to_uninterrupted"] = list(crashed.items()) == list(clean.items())
    log(json.dumps(stats))
    return stats


def _check(store_path, bufs, acked, targeted, stats) -> None:
    with Store(store_path, now=lambda: NOW) as store:
        report = store.check(check_signatures=False)  # verified at ingest
        if not report.consistent:
            raise AssertionError(f"inconsistent after kill {stats['kills']}: {report.to_dict()}")
        last = max(acked, default=-1)
        for buf in bufs[: last + 1]:
            h = post_hash(buf)
            if h not in targeted and store.get(h) is None:
                raise AssertionError(f"acknowledged post {h.hex()} lost after kill {stats['kills']}")
    stats["checks"] += 1
    stats["acked_max"] = last


# --- killing a repair ---------------------------------------------------------------------------


def damage_views(store_path, seed: int) -> None:
    """Delete, alter and invent derived entries so a repair has much to write."""
    rng = random.Random(seed)
    with Store(store_path, now=lambda: NOW) as store, store.in_flight():
        derived = [k for k, _ in store.items() if not k.startswith((b"!post!", b"!deleted!", b"!meta!", b"!local!"))]
        with store.db.write_batch() as wb:
            for key in rng.sample(derived, len(derived) // 3):
                if rng.random() < 0.5:
                    wb.delete(key)
                else:
                    wb.put(key, b"damaged")
            for i in range(200):
                wb.put(b"!chat!junk\x00" + i.to_bytes(8, "big") + rng.randbytes(32), b"")


def contents(store_path) -> list[tuple[bytes, bytes]]:
    """Every key and value of the store, in any format (opened read-only, so a format-1 store is read too)."""
    db, key, links = opening.open_db(Path(store_path), create=False, readonly=True, migrating=True)
    try:
        return list(db.iterator())
    finally:
        opening.close_db(db, key, links)


def digest(store_path) -> str:
    """A digest of every key and value (LevelDB's file layout may differ; the contents may not).

    Leaves out ``!local!checked``: when a ``check --repair`` ran, written after its repair (a kill between
    the two leaves the repaired store without it), not part of what the repair makes."""
    h = blake3.blake3()
    for key, value in contents(store_path):
        if key == CHECKED:
            continue
        h.update(len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value)
    return h.hexdigest()


def run_repair_kills(kills: int, posts: int, seed: int = 1, workdir=None, log=print) -> dict:
    """SIGKILL ``cablestore check --repair`` at random moments: the store is unrepaired or repaired, never between.

    After each kill the store's contents must equal the damaged store's or
    the fully repaired one's, and running the repair again must give the
    fully repaired store.
    """
    work = Path(workdir or tempfile.mkdtemp(prefix="cablestore-crash-repair-"))
    work.mkdir(parents=True, exist_ok=True)
    damaged, repaired, trial = work / "damaged", work / "repaired", work / "trial"
    with Store(damaged, now=lambda: NOW) as store:
        store.ingest_many(Workload(seed, posts))
    damage_views(damaged, seed)
    shutil.copytree(damaged, repaired)
    with Store(repaired, now=lambda: NOW) as store:
        start = time.perf_counter()
        if not store.check(fix=True, check_signatures=False).consistent:
            raise AssertionError("the uninterrupted repair did not make the store consistent")
        took = time.perf_counter() - start
    states = {digest(damaged): "unrepaired", digest(repaired): "repaired"}
    cmd = [sys.executable, "-m", "cablestore", "check", str(trial), "--repair", "--no-verify-signatures", "--quiet"]
    rng = random.Random(seed)
    shutil.copytree(damaged, trial)
    start = time.perf_counter()
    subprocess.run(cmd, env=_env(), stdout=subprocess.DEVNULL, check=False)  # how long a whole child takes here
    child = time.perf_counter() - start
    stats = {"kills": 0, "unrepaired": 0, "repaired": 0, "posts": posts, "repair_seconds": round(took, 2)}
    attempts = 0
    while stats["kills"] < kills and attempts < 4 * kills:
        attempts += 1
        shutil.rmtree(trial, ignore_errors=True)
        shutil.copytree(damaged, trial)
        proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 0.97) * child)  # the later part: the repair itself
        if proc.poll() is not None:
            proc.wait()
            continue  # finished before the kill: not a kill
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        stats["kills"] += 1
        state = states.get(digest(trial))
        if state is None:
            raise AssertionError(f"kill {stats['kills']}: the store is half-repaired")
        stats[state] += 1
        with Store(trial, now=lambda: NOW) as store:
            store.check(fix=True, check_signatures=False)
        if states.get(digest(trial)) != "repaired":
            raise AssertionError(f"kill {stats['kills']}: repairing again did not finish the repair")
    log(json.dumps(stats))
    return stats


# --- killing a migration ------------------------------------------------------------------------

_MIGRATE_CHILD = """
import os, signal, sys
from cablestore import Store

class KillAt:  # a Progress that SIGKILLs this process at its n-th call: a kill at a known phase of the migration
    def __init__(self, n):
        self.n = n
    def _tick(self, *args, **kw):
        self.n -= 1
        if self.n == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        return self
    stage = advance = done = _tick

Store.migrate(sys.argv[1], KillAt(int(sys.argv[2])))
print("finished", flush=True)
"""


def run_migrate_kills(source, workdir, expected: list | None = None, log=print) -> dict:
    """SIGKILL a migration of the format-1 store ``source`` at each of its phases; each resumed gives the same store.

    The child is killed at its n-th progress call (the migration's stage,
    the reindex's stages, each of its advances and its end, just before the
    format's flip), for n = 1, 2, ... until a child finishes.  After each
    kill the store is format 1 with ``!local!migrating`` and opening it
    raises ``MigrationNeededError``; ``Store.migrate`` then finishes it, and
    its contents must equal ``expected`` (default: an uninterrupted
    migration's).
    """
    from cablestore.errors import MigrationNeededError
    from cablestore.keyspace.keys import FORMAT_KEY, MIGRATING

    work = Path(workdir)
    if expected is None:
        shutil.copytree(source, work / "whole")
        Store.migrate(work / "whole")
        expected = contents(work / "whole")
    stats = {"points": 0, "kills": 0, "resumed": 0}
    for n in range(1, 100):
        trial = work / f"kill-{n}"
        shutil.copytree(source, trial)
        done = subprocess.run([sys.executable, "-c", _MIGRATE_CHILD, str(trial), str(n)], env=_env(), capture_output=True, text=True, timeout=120)
        if done.returncode == 0 and "finished" in done.stdout:
            shutil.rmtree(trial)
            break  # the migration made fewer progress calls than n: every point was killed
        stats["points"] += 1
        if done.returncode != -signal.SIGKILL:
            raise AssertionError(f"kill point {n}: the child failed instead of being killed: {done.stderr.strip()[-500:]}")
        stats["kills"] += 1
        left = dict(contents(trial))
        if left.get(FORMAT_KEY) != b"cablestore-1" or MIGRATING not in left:
            raise AssertionError(f"kill point {n}: the store is not format 1 with the migration's marker")
        try:
            Store(trial, readonly=True).close()
            raise AssertionError(f"kill point {n}: a half-migrated store opened")
        except MigrationNeededError:
            pass
        if Store.migrate(trial).resumed:
            stats["resumed"] += 1
        if contents(trial) != expected:
            raise AssertionError(f"kill point {n}: migrating again did not give the uninterrupted migration's store")
        shutil.rmtree(trial)
    log(json.dumps(stats))
    return stats


def _env() -> dict:
    root = str(Path(__file__).resolve().parent.parent)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        child(argv[1], argv[2], argv[3], int(argv[4]), pause=argv[5:] != ["--no-pause"])
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.crash", description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--posts", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--repair", action="store_true", help="kill `check --repair` instead of ingest")
    parser.add_argument("--migrate", action="store_true", help="kill `Store.migrate` of the format-1 fixture store at each of its phases")
    args = parser.parse_args(argv)
    if args.migrate:
        import tarfile

        work = Path(args.dir or tempfile.mkdtemp(prefix="cablestore-crash-migrate-"))
        with tarfile.open(Path(__file__).resolve().parent.parent / "tests/data/format1-store.tar.gz") as tar:
            tar.extractall(work / "source", filter="data")
        run_migrate_kills(work / "source" / "format1-store", work)
        return 0  # run_migrate_kills raises on a store a kill left half-migrated
    if args.repair:
        run_repair_kills(args.kills, args.posts, args.seed, args.dir)
        return 0  # run_repair_kills raises on a half-repaired store
    stats = run(args.kills, args.posts, args.seed, args.dir)
    return 0 if stats["identical_to_uninterrupted"] else 1


if __name__ == "__main__":
    sys.exit(main())
