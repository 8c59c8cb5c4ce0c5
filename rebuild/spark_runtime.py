"""Starting Spark for the rebuild: the session, its executors' Python, its log, its failures in one line.

Runs locally by default (``local[*]``), on any master given with
``--master``, or under ``spark-submit`` (whose master then wins).

The executors' Python (see docs/cluster.md):

* on ``local`` masters, the driver's own interpreter (``sys.executable``),
  so a virtualenv works without being activated;
* on any other master, the driver's environment packed by
  ``rebuild/shipenv.py`` and shipped with ``spark.archives``
  (``PYSPARK_PYTHON=./env/bin/python``), so executors need nothing
  installed; unless ``ship_env=False`` (``--no-ship-env``), ``PYSPARK_PYTHON``
  is set, or spark-submit already names a Python: then ``PYSPARK_PYTHON``,
  else ``python3`` from each worker's PATH.

Spark's own output (Java and log4j lines, executor stderr, py4j's gateway
log, and the Python warnings raised while Spark runs, such as pyspark's
``FutureWarning`` about pandas 3) goes to a log file, never to the terminal;
its path, and the cause Spark gave, are named in the error when a run fails
(the log itself: ``rebuild/spark_log.py``).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from contextlib import contextmanager

from cablestore.errors import CableError, RebuildError, SparkMasterUnreachableError, SparkUnavailableError

from .spark_log import failure, log_cause, log_path, open_log, quiet_gateway, warnings_to_log  # noqa: F401 - log_path: re-exported

CONNECT_TIMEOUT = 50.0  # seconds to start a context on a remote master; Spark itself gives up after 60 with a stopped context


def java_problem() -> str | None:
    """Why Spark's JVM cannot start here, found without starting it; None when Java 17 or newer is there.

    Spark runs ``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is set, else
    ``java`` from PATH; that one's ``java -version`` (tens of ms) gives the version.
    """
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        return f"JAVA_HOME names no Java ({java_home})" if java_home else "no java on PATH and no JAVA_HOME"
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{java} -version failed ({type(exc).__name__})"
    m = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if m is None:
        return f"{java} -version names no version"
    major = int(m.group(2) or 0) if m.group(1) == "1" else int(m.group(1))  # "1.8.0": Java 8
    return None if major >= 17 else f"{java} is Java {major}"


def require_java() -> None:
    """Refuse early, in one line, when no Java 17 or newer is installed."""
    problem = java_problem()
    if problem is not None:
        raise RebuildError(f"Java 17 or newer is required for engine='spark': {problem} (install a JDK, or use engine='local')")


def is_local(master: str) -> bool:
    """True for masters whose executors run on this machine, inside the driver's JVM."""
    return master == "local" or master.startswith("local[")


def executor_python(master: str, shipped: bool = False) -> str:
    """The interpreter the executors run: the shipped environment's, ``PYSPARK_PYTHON``, else the driver's own on local masters.

    On other masters without either it is ``python3`` from each worker's
    PATH (PySpark's default), which must have cablestore installed.
    """
    if shipped:
        from .shipenv import EXECUTOR_PYTHON

        return EXECUTOR_PYTHON
    if os.environ.get("PYSPARK_PYTHON"):
        return os.environ["PYSPARK_PYTHON"]
    return sys.executable if is_local(master) else "python3"


def ships_env(master: str, conf, ship_env: bool = True) -> bool:
    """Whether a session on ``master`` ships the driver's packed environment to its executors."""
    named = os.environ.get("PYSPARK_PYTHON") or conf.get("spark.pyspark.python", None)
    return ship_env and not is_local(master) and not named


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


def session(
    master: str | None = None,
    app: str = "cablestore-rebuild",
    log: str | None = None,
    connect_timeout: float = CONNECT_TIMEOUT,
    ship_env: bool = True,
):
    """A SparkSession; ``master`` overrides, else spark-submit's, else local[*].

    Reuses the active session if there is one.  Spark's output goes to
    ``log`` (default: a temporary file removed at exit unless a run failed).
    On a master that is not local, ``ship_env`` packs this Python
    environment and ships it to the executors (see the module's docstring).
    """
    with warnings_to_log():
        return _session(master, app, log, connect_timeout, ship_env)


def _session(master: str | None, app: str, log: str | None, connect_timeout: float, ship_env: bool):
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
    shipped = ships_env(master, conf, ship_env)
    if shipped:
        from .shipenv import ARCHIVE_NAME, pack

        archives = [a for a in (conf.get("spark.archives", "") or "").split(",") if a]
        conf.set("spark.archives", ",".join([*archives, f"{pack()}#{ARCHIVE_NAME}"]))
    with _env("PYSPARK_PYTHON", executor_python(master, shipped)), quiet_gateway():
        sc = _start_context(SparkContext, conf, master, log, connect_timeout)
    sc.setLogLevel("WARN")
    return SparkSession(sc)


def _start_context(SparkContext, conf, master: str, log: str | None, connect_timeout: float):
    """Start the JVM with its output in the log file, and a SparkContext; kill the JVM if the master never answers."""
    from pyspark.java_gateway import launch_gateway

    gateway = SparkContext._gateway
    timer = None
    if gateway is None:
        path = open_log(log)
        start = os.path.getsize(path)
        with open(path, "ab") as out:
            try:
                gateway = launch_gateway(conf, popen_kwargs={"stdout": out, "stderr": out})
            except Exception as exc:
                cause = log_cause(path, start) or _first_line(exc)
                raise failure(SparkUnavailableError, f"could not start Spark's JVM: {cause}") from None
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
                raise failure(
                    SparkMasterUnreachableError, f"Spark master {master} did not accept the application within {connect_timeout:.0f} s"
                ) from None
            raise failure(SparkUnavailableError, f"could not start Spark on {master}: {_first_line(exc)}") from None
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
        worker = re.search(r"Error from python worker:\s*\n\s*([^\n]+)", str(exc))
        if worker:  # the executors' Python did not start: what it said
            line = f"the executors' Python failed to start: {worker.group(1).strip()[:200]}"
        if worker or "pyspark.daemon" in line or "No module named 'cablestore'" in line or "Cannot run program" in line:
            line += f"; do the executors' Python ({_python_exec()}) and cablestore exist there? (PYSPARK_PYTHON, or ship_env=True)"
        raise failure(SparkUnavailableError, f"the Spark job failed: {line}") from None


def _python_exec() -> str:
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    return getattr(sc, "pythonExec", None) or "python3"
