"""The Spark engine: the recomputation as a PySpark job over a snapshot.

Runs locally by default (``local[*]``), on any master given with
``--master``, or under ``spark-submit`` (whose master then wins).

What the executors need (see docs/operations.md, "Running on a cluster"):

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

from .fold import Fold, check_tombstones, fold_posts, parse_tombstones
from .local import known_faults, result_of
from .recompute import newer, partition_of
from .result import EngineResult
from .snapshot import iter_segment, load_manifest

CONNECT_TIMEOUT = 50.0  # seconds to start a context on a remote master; Spark itself gives up after 60 with a stopped context
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
        if isinstance(exc.__context__, KeyboardInterrupt):
            raise KeyboardInterrupt from None  # an interrupted call's clean-up failed: still an interrupt
        line = _first_line(exc)
        if "pyspark.daemon" in line or "No module named 'cablestore'" in line:
            line += f"; do the executors' Python ({_python_exec()}) and cablestore exist there? (PYSPARK_PYTHON)"
        raise _failure(SparkUnavailableError, f"the Spark job failed: {line}") from None


def _python_exec() -> str:
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    return getattr(sc, "pythonExec", None) or "python3"



def _files(manifest: dict, kind: str) -> list:
    """``(name, blake3)`` of the segments of one kind, in partition order."""
    return [(n, info["blake3"]) for n, info in sorted(manifest["files"].items()) if n.startswith(kind)]


def _tombstones_by_maker(sc, directory: str, files: list, parts: int):
    """Sound tombstones keyed by the partition of the delete that made them (the only shuffle of records)."""

    def read(f):
        tombs = parse_tombstones(r for r in iter_segment(directory, f[0], f[1]) if r[0] == "t")
        return [(partition_of(t.by, parts), t) for t in tombs]

    return sc.parallelize(files, len(files)).flatMap(read)


def _checked_tombstones(directory: str, primary: list):
    """In the partition of their deletes: cross-check tombstones, and route them to where they are needed.

    Yields ``(partition, item)``: ``("on", tombstone, status)`` to the target's
    partition, ``("made", tombstone)`` to the delete's, ``("fault", fault)`` anywhere.
    """
    parts = len(primary)

    def one(i, items):
        tombs = [t for _, t in items]
        if not tombs:
            return []
        makers = {t.by for t in tombs}
        by_blobs = {r[1]: r[2] for r in iter_segment(directory, *primary[i]) if r[0] == "p" and r[1] in makers}
        sink = Fold(parts)
        on_target, made_by = check_tombstones(tombs, by_blobs, sink)
        out = [(i, ("fault", f)) for f in sink.faults]
        out += [(partition_of(target, parts), ("on", t, status)) for target, pairs in on_target.items() for t, status in pairs]
        out += [(i, ("made", t)) for made in made_by.values() for t in made]
        return out

    return one


def _recompute_segment(directory: str, primary: list, live: list, check_signatures: bool, wanted, skip):
    """Partition ``i``'s work: its primary segment recomputed and its live segment, each folded to digests."""
    parts = len(primary)

    def one(i, items):
        rec = Fold(parts, wanted)
        on_target: dict = {}
        made_by: dict = {}
        for _, item in items:
            if item[0] == "on":
                on_target.setdefault(item[1].target, []).append((item[1], item[2]))
            elif item[0] == "made":
                made_by.setdefault(item[1].by, []).append(item[1])
            else:
                rec.faults.append(item[1])
        records = list(iter_segment(directory, *primary[i]))
        parse_tombstones((r for r in records if r[0] == "t"), rec)  # counts them, and the damaged ones are faults
        posts = ((r[1], r[2]) for r in records if r[0] == "p")
        fold_posts(rec, posts, on_target, made_by, check_signatures, skip)
        liv = Fold(parts, wanted)
        liv.add_entries(iter_segment(directory, *live[i]))
        return [(rec, liv)]

    return one


def one_pass(sc, directory: str, manifest: dict, check_signatures: bool, wanted=None, skip=frozenset(), local_user=None) -> tuple[Fold, Fold]:
    """``(recomputed, live)`` folds: every partition digests its own entries; only folds are collected.

    Shuffles carry tombstones only (to the partition of the delete that made
    them, to be cross-checked with it, then to their target's) and each
    partition's best candidate per latest group; never a view entry.
    """
    primary, live = _files(manifest, "primary"), _files(manifest, "live")
    parts = len(primary)
    by_maker = _tombstones_by_maker(sc, directory, primary, parts).partitionBy(parts, lambda i: i)
    routed = by_maker.mapPartitionsWithIndex(_checked_tombstones(directory, primary)).partitionBy(parts, lambda i: i)
    folds = routed.mapPartitionsWithIndex(_recompute_segment(directory, primary, live, check_signatures, wanted, skip)).cache()

    def latest(items):
        fold = Fold(parts, wanted)
        fold.add_latest(dict(items))
        return [(fold, Fold(parts, wanted))]

    def without_best(pair):
        pair[0].best = {}
        return pair

    winners = folds.flatMap(lambda pair: pair[0].best.items()).reduceByKey(newer, parts).mapPartitions(latest)
    try:
        collected = folds.map(without_best).union(winners).collect()
    except KeyboardInterrupt:
        raise  # the JVM connection was cut mid-call: no further call on it
    except BaseException:
        folds.unpersist()
        raise
    folds.unpersist()
    rec, liv = Fold(parts, wanted), Fold(parts, wanted)
    for recomputed, live in collected:
        rec.merge(recomputed)
        liv.merge(live)
    rec.add_resolved(local_user)  # from every partition's moderation posts, on the driver
    return rec, liv


def run(snapshot_dir, check_signatures: bool = True, master: str | None = None, spark=None, progress=None, log=None, local_user=None) -> EngineResult:
    """Verify a snapshot directory on Spark; the entries of differing buckets are collected before returning."""
    directory = os.path.abspath(str(snapshot_dir))
    manifest = load_manifest(directory)
    parts = manifest["partitions"]
    spark = spark or session(master, log=log)
    sc = spark.sparkContext
    with job_errors():
        if local_user is None and manifest.get("local_user"):
            local_user = bytes.fromhex(manifest["local_user"])
        rec, live = one_pass(sc, directory, manifest, check_signatures, local_user=local_user)
        result = result_of("spark", parts, rec, live)
        differing = frozenset(result.differing_buckets())
        found = ({}, {})
        if differing:
            # The snapshot may be a temporary directory, gone once this returns.
            rec2, live2 = one_pass(sc, directory, manifest, False, differing, known_faults(rec.faults), local_user=local_user)
            found = (rec2.entries, live2.entries)
    result.fetch = lambda wanted: found
    return result
