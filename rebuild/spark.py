"""The Spark engine: the recomputation as a PySpark job over a snapshot.

Runs locally by default (``local[*]``), on any master given with
``--master``, or under ``spark-submit`` (whose master then wins).

What the executors need (see README, "Running on a cluster"):

* a Python with cablestore installed.  On ``local`` masters they run the
  driver's own interpreter (``sys.executable``), so a virtualenv works without
  being activated; elsewhere they run ``PYSPARK_PYTHON`` (or
  ``spark.pyspark.python``), else ``python3`` from each worker's PATH;
* the snapshot directory at the same path on storage they can all read.

Spark's own output (Java and log4j lines, executor stderr) goes to a log file,
never to the terminal; its path is named in the error when a run fails.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
from contextlib import contextmanager

from cablestore.errors import CableError, RebuildError, SparkMasterUnreachableError, SparkUnavailableError

CONNECT_TIMEOUT = 25.0  # seconds for a master to accept the application (Spark itself waits 60)
_log = {"path": None, "keep": False}


def require_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))):
        raise RebuildError("Java 17 or newer is required for --engine spark (install a JDK, or use --engine local)")


def is_local(master: str) -> bool:
    """True for masters whose executors run on this machine, inside the driver's JVM."""
    return master == "local" or master.startswith("local[")


def executor_python(master: str) -> str:
    """The interpreter the executors run: ``PYSPARK_PYTHON``, else the driver's own on local masters.

    On other masters without ``PYSPARK_PYTHON`` it is ``python3`` from each
    worker's PATH (PySpark's default), which must have cablestore installed.
    """
    if os.environ.get("PYSPARK_PYTHON"):
        return os.environ["PYSPARK_PYTHON"]
    return sys.executable if is_local(master) else "python3"


def log_path() -> str | None:
    """The file Spark's own output goes to in this process (None before a session starts)."""
    return _log["path"]


def _open_log(path: str | None) -> str:
    if path is None:
        fd, path = tempfile.mkstemp(prefix="cablestore-spark-", suffix=".log")
        os.close(fd)
        atexit.register(_drop_log, path)
    else:
        _log["keep"] = True
    _log["path"] = os.path.abspath(path)
    return _log["path"]


def _drop_log(path: str) -> None:
    """A temporary log is removed at exit unless a failure named it."""
    if not _log["keep"]:
        try:
            os.unlink(path)
        except OSError:
            pass


def _failure(exc_type, message: str) -> CableError:
    _log["keep"] = True
    where = f" (Spark's log: {_log['path']})" if _log["path"] else ""
    return exc_type(message + where)


def check_master(master: str, timeout: float = 5.0) -> None:
    """Fail fast, before starting a JVM, when no host of a ``spark://`` master accepts a connection."""
    if not master.startswith("spark://"):
        return
    reasons = []
    for hostport in master[len("spark://") :].split(","):
        host, _, port = hostport.rpartition(":")
        if not host or not port.isdigit():
            raise SparkMasterUnreachableError(f"bad Spark master URL {master!r} (expected spark://HOST:PORT)")
        try:
            socket.create_connection((host, int(port)), timeout=timeout).close()
            return
        except OSError as exc:
            reasons.append(f"{hostport}: {exc.strerror or exc}")
    raise SparkMasterUnreachableError(f"cannot reach Spark master {master} ({'; '.join(reasons)})")


@contextmanager
def _env(name: str, value: str):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def session(master: str | None = None, app: str = "cablestore-rebuild", log: str | None = None, connect_timeout: float = CONNECT_TIMEOUT):
    """A SparkSession; ``master`` overrides, else spark-submit's, else local[*].

    Reuses the active session if there is one.  Spark's output goes to
    ``log`` (default: a temporary file removed at exit unless a run failed).
    """
    require_java()
    try:
        from pyspark import SparkConf, SparkContext
        from pyspark.sql import SparkSession
    except ImportError as exc:  # pragma: no cover - pyspark is a dependency
        raise RebuildError("pyspark is not installed") from exc
    if SparkContext._active_spark_context is not None:
        return SparkSession.builder.getOrCreate()
    conf = SparkConf()
    master = master or conf.get("spark.master", None) or "local[*]"
    check_master(master)
    conf.setMaster(master).setAppName(app)
    conf.set("spark.ui.enabled", "false").set("spark.ui.showConsoleProgress", "false")
    conf.set("spark.sql.shuffle.partitions", "8")
    with _env("PYSPARK_PYTHON", executor_python(master)):
        sc = _start_context(SparkContext, conf, master, log, connect_timeout)
    sc.setLogLevel("WARN")
    return SparkSession(sc)


def _start_context(SparkContext, conf, master: str, log: str | None, connect_timeout: float):
    """Start the JVM with its output in the log file, and a SparkContext; kill the JVM if the master never answers."""
    from pyspark.java_gateway import launch_gateway

    gateway = SparkContext._gateway
    timer = None
    if gateway is None:
        path = _open_log(log)
        with open(path, "ab") as out:
            try:
                gateway = launch_gateway(conf, popen_kwargs={"stdout": out, "stderr": out})
            except Exception as exc:
                raise _failure(SparkUnavailableError, f"could not start Spark's JVM: {_first_line(exc)}") from None
        if gateway.proc is not None and not is_local(master):
            timer = threading.Timer(connect_timeout, _kill, (gateway.proc,))
            timer.daemon = True
            timer.start()
    try:
        return SparkContext(conf=conf, gateway=gateway)
    except BaseException as exc:
        _discard_gateway(SparkContext, gateway)
        if isinstance(exc, Exception):
            if timer is not None and not timer.is_alive():
                raise _failure(
                    SparkMasterUnreachableError, f"Spark master {master} did not accept the application within {connect_timeout:.0f} s"
                ) from None
            raise _failure(SparkUnavailableError, f"could not start Spark on {master}: {_first_line(exc)}") from None
        raise
    finally:
        if timer is not None:
            timer.cancel()


def _kill(proc) -> None:
    try:
        proc.kill()
    except OSError:
        pass


def _discard_gateway(SparkContext, gateway) -> None:
    """A failed start leaves no JVM and no stale gateway behind for the next session."""
    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkContext._active_spark_context = None
    proc = getattr(gateway, "proc", None)
    if proc is not None:
        _kill(proc)
        try:
            proc.wait(timeout=10)
        except Exception:
            pass
    try:
        gateway.shutdown()
    except Exception:
        pass


_PY_ERROR = re.compile(r"^(\w+(?:\.\w+)*(?:Error|Exception|Exit)): (.*)$", re.M)


def _first_line(exc: BaseException) -> str:
    """One readable line from a Spark failure: the executor's Python error if there is one."""
    text = str(exc)
    if "Traceback (most recent call last)" in text:
        tail = text.split("Traceback (most recent call last)", 1)[1]
        found = _PY_ERROR.findall(tail.split("\n\tat ", 1)[0])
        if found:
            name, msg = found[-1]
            return f"{name.rsplit('.', 1)[-1]}: {msg}"
    for line in text.splitlines():
        line = line.strip().lstrip(": ").strip()
        if line and not line.startswith("An error occurred while calling"):
            return line[:300]
    return type(exc).__name__


@contextmanager
def job_errors():
    """Turn a failed Spark job into one SparkUnavailableError line naming the log."""
    try:
        yield
    except CableError:
        raise
    except Exception as exc:
        line = _first_line(exc)
        if "pyspark.daemon" in line or "No module named 'cablestore'" in line:
            line += f"; do the executors' Python ({_python_exec()}) and cablestore exist there? (PYSPARK_PYTHON)"
        raise _failure(SparkUnavailableError, f"the Spark job failed: {line}") from None


def _python_exec() -> str:
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    return getattr(sc, "pythonExec", None) or "python3"


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


def run(snapshot_dir, check_signatures: bool = True, master: str | None = None, spark=None, progress=None, log=None) -> EngineResult:
    directory = os.path.abspath(str(snapshot_dir))
    manifest = load_manifest(directory)
    parts = manifest["partitions"]
    spark = spark or session(master, log=log)
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
      with job_errors():
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
