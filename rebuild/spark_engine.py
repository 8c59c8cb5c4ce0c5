"""The Spark engine: the recomputation as a PySpark job over a Parquet snapshot.

Spark reads the snapshot wherever it lives (a local path, ``file://``,
``hdfs://``, ``s3a://``: whatever the cluster's Hadoop filesystems reach)
with its ``binaryFile`` source, one task per file: the task's Python gets
the file's bytes whole, checks them against the manifest's sha256 (a
damaged or tampered file fails the job before a row of it is used), decodes
the Parquet with pyarrow and runs the per-partition fold both engines share
(``rebuild/fold.py``).  That moves each file from the JVM to Python in one
piece; ``spark.read.parquet`` would hand Python rows (pickled, about four
times the CPU) or Arrow batches (``mapInArrow``, which needs pandas on every
node), and a separate job to check the files.

The job, on a snapshot of P partitions:

1. the driver reads the manifest and the tombstones (small), and counts
   and parses them as the in-process engine does;
2. if any tombstone exists, the posts of the delete posts that made them
   are found per partition and cross-checked with them, on the executors;
3. every posts file and every live file is folded to digests on the
   executors; the only shuffle carries each partition's fold and the
   best candidate of each "latest" group (never a view entry), whose
   winners' entries are folded in the partitions the shuffle makes.

Session, executors' Python and failures: ``rebuild/spark_runtime.py``; Spark's log: ``rebuild/spark_log.py``.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import threading
from urllib.parse import unquote

from cablestore.errors import RebuildError
from cablestore.moderation import RELEVANT_TYPES
from cablestore.wire.codec import post_type_of

from .exporter import manifest_facts, manifest_search, manifest_seed
from .fold import Fold, check_tombstones, fold_posts, parse_tombstones
from .local import known_faults, result_of
from .parquet import MANIFEST, files_of, parse_manifest, pick, rows, spark_uri
from .recompute import enforcement_rows, newer, partition_of
from .result import EngineResult
from .spark_log import quiet_gateway
from .spark_runtime import job_errors, session

_FOLD = "\0fold"  # shuffle key of a file's fold, beside the (view, group) keys of candidates


def read_manifest(spark, uri: str, where: str | None = None) -> dict:
    """The snapshot's manifest, read through Spark (so from any filesystem the cluster reads); ``where`` names it in errors."""
    where = where or uri
    try:
        found = spark.sparkContext.binaryFiles(f"{uri}/{MANIFEST}").collect()  # a small job: no SQL planning
    except Exception as exc:
        if "does not exist" in str(exc) or "PATH_NOT_FOUND" in str(exc):
            raise RebuildError(f"{where} is not a snapshot (no {MANIFEST}; an interrupted export leaves none)") from None
        raise
    return parse_manifest(found[0][1] if found else b"", where)


def _files(spark, uri: str, names: list[str]):
    """An RDD of ``(name, bytes)``: each snapshot file whole, read by Spark's Hadoop filesystems (``binaryFiles``).

    The bytes reach Python as they are (no pickling in the JVM, one copy):
    an executor holds one file at a time, and an export bounds their size.
    """
    known = frozenset(names)
    paths = ",".join(f"{uri}/{n}" for n in names)
    return spark.sparkContext.binaryFiles(paths, minPartitions=len(names)).map(lambda pair: (_name_of(pair[0], known), pair[1]))


def _name_of(path: str, names: frozenset) -> str:
    path = unquote(path)
    for name in names:
        if path.endswith("/" + name):
            return name
    raise RebuildError(f"Spark read {path}, which the manifest does not name")


def _check(tombs_blob: bytes, found: dict, parts: int) -> tuple[dict, dict, list]:
    """``(on_target, made_by, faults)`` of one partition's tombstones (pickled) against its stored post/deletes."""
    sink = Fold(parts)
    on_target, made_by = check_tombstones(pickle.loads(tombs_blob), found, sink)
    return on_target, made_by, sink.faults


def _cross_check(spark, uri: str, manifest: dict, by_part: dict) -> list:
    """Cross-check tombstones with their stored post/deletes, in the partition of the deletes, on the executors.

    ``by_part``: partition -> pickled tombstones whose post/delete hashes there.
    Returns every partition's ``(on_target, made_by, faults)``.
    """
    parts = manifest["partitions"]
    infos = {n: i for n, i in files_of(manifest, "posts") if i["part"] in by_part}
    wanted = spark.sparkContext.broadcast(by_part)

    def blobs(item):
        name, data = item
        part = infos[name]["part"]
        makers = {t.by for t in pickle.loads(wanted.value[part])}
        return [(part, pick(data, name, infos[name], makers))]

    def check(pair):
        return pickle.dumps(_check(wanted.value[pair[0]], pair[1], parts))

    out = []
    if infos:
        parted = _files(spark, uri, list(infos)).flatMap(blobs).reduceByKey(_union, min(len(by_part), parts))
        out = [pickle.loads(c) for c in parted.map(check).collect()]
    wanted.unpersist()
    without = set(by_part) - {i["part"] for i in infos.values()}  # deletes of a partition without posts: none is stored
    return out + [_check(by_part[k], {}, parts) for k in sorted(without)]


def _union(a: dict, b: dict) -> dict:
    a.update(b)
    return a


def _routes(checked: list, parts: int) -> tuple[dict, list]:
    """Per partition, pickled ``(on_target, made_by)`` of the posts there; and every fault of the cross-check."""
    per: dict = {}
    faults = []
    for on_target, made_by, found in checked:
        faults += found
        for target, pairs in on_target.items():
            per.setdefault(partition_of(target, parts), ({}, {}))[0].setdefault(target, []).extend(pairs)
        for by, made in made_by.items():
            per.setdefault(partition_of(by, parts), ({}, {}))[1].setdefault(by, []).extend(made)
    return {k: pickle.dumps(v) for k, v in per.items()}, faults


def _fold_task(infos: dict, parts: int, routes, check_signatures: bool, wanted, skip, kept_out_rows=None, search: bool = False):
    """One file's fold: a posts file recomputed (with the tombstones routed to its partition), a live file digested.

    ``kept_out_rows``: a broadcast of the resolved rows that keep posts out (None: nothing is kept out).
    ``search``: the store keeps the search view, so its entries are recomputed too.
    """

    def one(item):
        name, data = item
        info = infos[name]
        fold = Fold(parts, wanted, search)
        fold.rows = kept_out_rows.value if kept_out_rows is not None else None
        if info["part"] is None:  # a live file
            fold.add_entries(rows(data, name, info))
            kind = "live"
        else:
            on_target, made_by = pickle.loads(routes.value[info["part"]]) if info["part"] in routes.value else ({}, {})
            fold_posts(fold, rows(data, name, info), on_target, made_by, check_signatures, skip)
            kind = "rec"
        best, fold.best = fold.best, {}
        return [((_FOLD, kind, name), fold), *best.items()]

    return one


def _kept_out_rows(spark, uri: str, manifest: dict, routing: dict, local_user, check_signatures: bool):
    """A first, light pass for a store with a local user: the moderation posts, resolved on the driver into
    the rows that keep posts out, broadcast to the folds (None when nothing can be kept out)."""
    if local_user is None:
        return None
    post_infos = dict(files_of(manifest, "posts"))
    if not post_infos:
        return None

    def moderation(item):
        name, data = item
        return [(h, blob) for h, blob in rows(data, name, post_infos[name]) if post_type_of(blob) in RELEVANT_TYPES]

    candidates = _files(spark, uri, list(post_infos)).flatMap(moderation).collect()
    on_target: dict = {}
    for blob in routing.values():
        on_target.update(pickle.loads(blob)[0])
    found = enforcement_rows(local_user, candidates, on_target, check_signatures, manifest_facts(manifest), manifest_seed(manifest))
    return None if found is None else spark.sparkContext.broadcast(found)


def one_pass(spark, uri: str, manifest: dict, check_signatures: bool, wanted=None, skip=frozenset(), local_user=None) -> tuple[Fold, Fold]:
    """``(recomputed, live)`` folds of a snapshot; only folds and latest-group candidates are shuffled.

    The moderation state is resolved on the driver, from every partition's
    moderation posts (few; carried in the folds) and ``local_user``.
    """
    parts = manifest["partitions"]
    sc = spark.sparkContext
    rec = Fold(parts, wanted)
    tomb_files = files_of(manifest, "tombstones")
    tomb_infos = dict(tomb_files)
    records = _files(spark, uri, list(tomb_infos)).collect() if tomb_files else []
    tombs = parse_tombstones((("t", *r) for name, data in records for r in rows(data, name, tomb_infos[name])), rec)
    by_part: dict = {}
    for t in tombs:
        by_part.setdefault(partition_of(t.by, parts), []).append(t)
    checked = _cross_check(spark, uri, manifest, {k: pickle.dumps(v) for k, v in by_part.items()}) if by_part else []
    routing, faults = _routes(checked, parts)
    rec.faults += faults
    routes = sc.broadcast(routing)
    infos = {n: i for table in ("posts", "live") for n, i in files_of(manifest, table)}
    kept_out_rows = _kept_out_rows(spark, uri, manifest, routing, local_user, check_signatures)
    if infos:
        task = _fold_task(infos, parts, routes, check_signatures, wanted, skip, kept_out_rows, manifest_search(manifest))

        def latest(items):
            fold, out = Fold(parts, wanted), []
            for key, value in items:
                if key[0] == _FOLD:
                    out.append((key[1], value))
                else:
                    fold.add_latest({key: value})
            return [*out, ("rec", fold)]

        collected = _files(spark, uri, list(infos)).flatMap(task).reduceByKey(newer, parts).mapPartitions(latest).collect()
    else:
        collected = []
    routes.unpersist()
    if kept_out_rows is not None:
        kept_out_rows.unpersist()
    live = Fold(parts, wanted)
    for kind, fold in collected:
        (rec if kind == "rec" else live).merge(fold)
    rec.add_sums()  # every partition's range sums, merged
    rec.add_resolved(local_user, manifest_facts(manifest) if local_user is not None else (), manifest_seed(manifest))
    return rec, live


def _check_uri(uri: str) -> None:
    """Spark takes a comma-separated list of paths, with glob patterns: a snapshot's location must have neither."""
    bad = sorted(set(uri) & set(",{}[]*?\\"))
    if bad:
        raise RebuildError(f"{uri}: the Spark engine cannot read a snapshot whose location holds {' '.join(bad)} (move or link it elsewhere)")


@contextlib.contextmanager
def task_progress(spark, progress, every: float = 0.5):
    """Draw the Spark tasks finished while the block runs on ``progress`` (a thread polls Spark's status tracker)."""
    if progress is None or not progress.enabled:
        yield
        return
    progress.stage("recompute views (spark engine): tasks done")
    tracker, finished, stop = spark.sparkContext.statusTracker(), {}, threading.Event()

    def count() -> bool:
        try:  # a stage seen once is asked again: its last tasks finish between two polls
            finished.update(dict.fromkeys(set(tracker.getActiveStageIds()) - finished.keys(), 0))
            for stage in finished:
                info = tracker.getStageInfo(stage)
                if info is not None:
                    finished[stage] = info.numCompletedTasks
        except Exception:  # the gateway went away (the job failed or was interrupted): the block raises that
            return False
        progress.advance(max(0, sum(finished.values()) - progress.count))
        return True

    def poll() -> None:
        while not stop.wait(every) and count():
            pass

    poller = threading.Thread(target=poll, name="cablestore-spark-progress", daemon=True)
    poller.start()
    try:
        yield
        stop.set()
        poller.join()
        count()  # the tasks finished since the last poll
    finally:
        stop.set()
        poller.join()


def run(
    snapshot, check_signatures: bool = True, master: str | None = None, spark=None, progress=None, log=None, ship_env: bool = True, local_user=None
) -> EngineResult:
    """Verify a snapshot (a path or URI) on Spark; the entries of differing buckets are collected before returning.

    ``local_user``: whose moderation state to resolve (default: the one the export recorded).
    """
    uri = spark_uri(snapshot)
    _check_uri(uri)
    spark = spark or session(master, log=log, ship_env=ship_env)
    with quiet_gateway(), job_errors(), task_progress(spark, progress):
        manifest = read_manifest(spark, uri, os.fspath(snapshot))
        parts = manifest["partitions"]
        if local_user is None and manifest.get("local_user"):
            local_user = bytes.fromhex(manifest["local_user"])
        rec, live = one_pass(spark, uri, manifest, check_signatures, local_user=local_user)
        result = result_of("spark", parts, rec, live)
        differing = frozenset(result.differing_buckets())
        found = ({}, {})
        if differing:
            # The snapshot may be a temporary directory, gone once this returns.
            rec2, live2 = one_pass(spark, uri, manifest, False, differing, known_faults(rec.faults), local_user=local_user)
            found = (rec2.entries, live2.entries)
    result.fetch = lambda wanted: found
    return result

