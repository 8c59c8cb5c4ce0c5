"""The Spark engine: the recomputation as a PySpark job over a snapshot.

Runs locally by default (``local[*]``), on any master given with
``--master``, or under ``spark-submit`` (whose master then wins).  Executors
need cablestore installed (``pip install cablestore`` on each node, or ship it
with ``--py-files``) and the snapshot directory on storage they can read.
"""

from __future__ import annotations

import os
import shutil
from cablestore.errors import RebuildError

from .recompute import (
    Fault,
    bucket,
    bucket_digest,
    classify,
    newer,
    recompute_post,
    render,
    tombstone_status,
    unpack_tombstone,
    view_of,
)
from .result import EngineResult
from .snapshot import iter_segment, load_manifest


def require_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))):
        raise RebuildError("Java 17 or newer is required for --engine spark (install a JDK, or use --engine local)")


def session(master: str | None = None, app: str = "cablestore-rebuild"):
    """A SparkSession; ``master`` overrides, else spark-submit's, else local[*]."""
    require_java()
    try:
        from pyspark import SparkConf
        from pyspark.sql import SparkSession
    except ImportError as exc:  # pragma: no cover - pyspark is a dependency
        raise RebuildError("pyspark is not installed") from exc
    builder = (
        SparkSession.builder.appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
    )
    if master or not SparkConf().contains("spark.master"):
        builder = builder.master(master or "local[*]")
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # the JVM failed to start: say so plainly
        raise RebuildError(f"could not start Spark: {exc}") from exc
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _segments(sc, directory: str, manifest: dict, kind: str):
    files = [(n, info["blake3"]) for n, info in sorted(manifest["files"].items()) if n.startswith(kind)]
    return sc.parallelize(files, max(1, len(files))).flatMap(lambda f: iter_segment(directory, f[0], f[1]))


def _classified(prim, check_signatures: bool, parts: int):
    posts = prim.filter(lambda r: r[0] == "p").map(lambda r: (r[1], r[2]))
    parsed = prim.filter(lambda r: r[0] == "t").map(lambda r: unpack_tombstone(r[1], r[2], r[3]))
    bad_tombs = parsed.filter(lambda t: isinstance(t, Fault))
    # Cross-check each tombstone with the post/delete it names as its maker.
    checked = (
        parsed.filter(lambda t: not isinstance(t, Fault))
        .map(lambda t: (t.by, t))
        .leftOuterJoin(posts, parts)
        .map(lambda kv: (kv[1][0], tombstone_status(kv[1][0], kv[1][1])))
        .cache()
    )
    bad_tombs = bad_tombs.union(checked.filter(lambda ts: isinstance(ts[1], Fault)).map(lambda ts: ts[1]))
    sound = checked.filter(lambda ts: not isinstance(ts[1], Fault))
    on_target = sound.map(lambda ts: (ts[0].target, ts)).groupByKey(parts).mapValues(list)
    made_by = sound.map(lambda ts: (ts[0].by, ts[0])).groupByKey(parts).mapValues(list)

    def one(kv):
        h, ((blob, on_t), made) = kv
        faults, post = classify(h, blob, on_t or (), check_signatures)
        return h, (recompute_post(h, blob, post, made or []) if post is not None else None), faults

    return posts.leftOuterJoin(on_target, parts).leftOuterJoin(made_by, parts).map(one), bad_tombs


def run(snapshot_dir, check_signatures: bool = True, master: str | None = None, spark=None, progress=None) -> EngineResult:
    directory = os.path.abspath(str(snapshot_dir))
    manifest = load_manifest(directory)
    parts = manifest["partitions"]
    spark = spark or session(master)
    sc = spark.sparkContext
    prim = _segments(sc, directory, manifest, "primary").cache()
    classified, bad_tombs = _classified(prim, check_signatures, parts)
    classified = classified.cache()
    sound = classified.filter(lambda r: r[1] is not None)
    per_post = sound.flatMap(lambda r: r[1][0])
    latest = (
        sound.flatMap(lambda r: r[1][1])
        .reduceByKey(newer, parts)
        .flatMap(lambda kv: render(kv[0][0], kv[0][1], kv[1]))
    )

    def keyed(kv):
        return (view_of(kv[0]), bucket(kv[0], parts)), (kv[0], kv[1])

    recomputed = per_post.union(latest).map(keyed).cache()
    live = _segments(sc, directory, manifest, "live").map(keyed).cache()
    try:
        kinds = prim.map(lambda r: r[0]).countByValue()
        result = EngineResult(
            engine="spark",
            partitions=parts,
            posts=kinds.get("p", 0),
            tombstones=kinds.get("t", 0),
            faults=classified.flatMap(lambda r: r[2]).collect() + bad_tombs.collect(),
            recomputed_digests=(rec_digests := _digests(recomputed, parts)),
            live_digests=(live_digests := _digests(live, parts)),
            recomputed_counts=_counts(rec_digests),
            live_counts=_counts(live_digests),
            fetch=None,
        )
        # Collect the differing buckets now: the snapshot may be a temporary
        # directory that is gone once this returns.
        differing = result.differing_buckets()
        rec, liv = _collect(recomputed, differing), _collect(live, differing)
        result.fetch = lambda wanted: (rec, liv)
        return result
    finally:
        for rdd in (prim, classified, recomputed, live):
            rdd.unpersist()


def _digests(rdd, parts: int) -> dict:
    """(view, bucket) -> (digest, entries), in one pass."""
    return rdd.groupByKey(parts).mapValues(lambda es: (bucket_digest(es), len(es))).collectAsMap()


def _counts(digests: dict) -> dict:
    counts = {}
    for (view_name, _), (_, n) in digests.items():
        counts[view_name] = counts.get(view_name, 0) + n
    return counts


def _collect(rdd, wanted) -> dict:
    if not wanted:
        return {}
    wanted = set(wanted)
    return dict(rdd.filter(lambda x: x[0] in wanted).map(lambda x: x[1]).collect())
