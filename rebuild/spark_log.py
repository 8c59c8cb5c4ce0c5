"""Spark's log: the file Spark's own output, py4j's logs and the Python warnings raised while Spark runs go to, never the terminal.

One file per process: the path given (``spark_log=``), else a temporary file
removed at exit unless a failure named it (:func:`failure`, which keeps it);
:func:`log_cause` reads the JVM's reason back from it.
:mod:`cablestore.rebuild.spark_runtime` starts the session and sends the
JVM's output here.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import tempfile
import warnings
from contextlib import contextmanager

from cablestore.errors import CableError

_log = {"path": None, "keep": False}
_early_warnings: list[str] = []  # warnings raised before the log file is opened: written to it once it is


def log_path() -> str | None:
    """The file Spark's own output goes to in this process (None before a session starts)."""
    return _log["path"]


def open_log(path: str | None) -> str:
    """Make ``path`` (None: a temporary file) this process's Spark log, py4j's loggers writing to it; return its absolute path."""
    if path is None:
        fd, path = tempfile.mkstemp(prefix="cablestore-spark-", suffix=".log")
        os.close(fd)
        atexit.register(_drop_log, path)
    else:
        open(path, "ab").close()  # a new file is created (its size is where this run's output starts)
        _log["keep"] = True
    _log["path"] = os.path.abspath(path)
    _quiet_py4j(_log["path"])
    if _early_warnings:
        _append_log("".join(_early_warnings))
        _early_warnings.clear()
    return _log["path"]


def _append_log(text: str) -> None:
    try:
        with open(_log["path"], "a", encoding="utf-8", errors="replace") as f:
            f.write(text)
    except OSError:
        pass  # a log that cannot be written loses the warning; the terminal still never gets it


def _warning_to_log(message, category, filename, lineno, file=None, line=None) -> None:
    text = warnings.formatwarning(message, category, filename, lineno, line)
    if _log["path"] is None:
        _early_warnings.append(text)
    else:
        _append_log(text)


@contextmanager
def warnings_to_log():
    """While Spark runs: Python warnings (pyspark's about pandas, say) go to Spark's log, not stderr.

    Which warnings are shown is left to the filters in effect (``-W``,
    ``PYTHONWARNINGS``); only where a shown one is written changes.
    """
    with warnings.catch_warnings():
        warnings.showwarning = _warning_to_log
        yield


def _quiet_py4j(path: str) -> None:
    """py4j's own loggers write to Spark's log, not the terminal."""
    logger = logging.getLogger("py4j")
    for handler in [h for h in logger.handlers if getattr(h, "_cablestore", False)]:
        logger.removeHandler(handler)
        handler.close()
    handler = logging.FileHandler(path, delay=True)
    handler._cablestore = True
    logger.addHandler(handler)
    logger.propagate = False


class _FromPy4j(logging.Filter):
    """Sends records py4j logs through the root logger (``logging.exception(...)``) to Spark's log instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        if f"{os.sep}py4j{os.sep}" not in record.pathname:
            return True
        for handler in logging.getLogger("py4j").handlers:
            if getattr(handler, "_cablestore", False):
                handler.handle(record)
        return False


@contextmanager
def quiet_gateway():
    """While Spark runs: py4j's tracebacks of an interrupted call (Ctrl-C mid-job) go to Spark's log, not stderr.

    py4j logs them with ``logging.exception`` on the root logger, which with
    no handler configured would install one that prints to stderr; a
    handler of the application's own still gets every other record.
    """
    root = logging.getLogger()
    quiet, keep = _FromPy4j(), logging.NullHandler() if not root.handlers else None
    root.addFilter(quiet)
    if keep is not None:
        root.addHandler(keep)
    try:
        with warnings_to_log():
            yield
    finally:
        root.removeFilter(quiet)
        if keep is not None:
            root.removeHandler(keep)


def _drop_log(path: str) -> None:
    """A temporary log is removed at exit unless a failure named it."""
    logging.getLogger("py4j").propagate = False
    if not _log["keep"]:
        try:
            os.unlink(path)
        except OSError:
            pass


def failure(exc_type, message: str) -> CableError:
    """``exc_type(message)`` naming Spark's log, which is then kept."""
    _log["keep"] = True
    where = f" (Spark's log: {_log['path']})" if _log["path"] else ""
    return exc_type(message + where)


_CAUSE = re.compile(r"^(?:Exception in thread \"[^\"]*\" |Caused by: )?(?:[\w$]+\.)*([\w$]*(?:Exception|Error)): (.+)$|^Error: (.+)$")


def log_cause(path: str, start: int = 0) -> str | None:
    """The reason the JVM gave for exiting, from its log after byte ``start`` (spark-submit's first error line)."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            text = f.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        m = _CAUSE.match(line.strip())
        if m:
            return (m.group(2) or m.group(3)).strip()[:300]
    return None
