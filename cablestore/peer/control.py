"""The control socket of a serving process: a command on a store ``serve`` holds runs inside ``serve``.

A store is open in one process at a time (LevelDB's lock).  While
``cablestore serve STORE`` runs, it listens on a Unix socket inside the
store directory (``STORE/cablestore.sock``, mode 0600, removed on exit), and
a command that finds the store locked (``show``, ``post``, ...) asks the
serving process to run it instead, on the store it holds: a post written so
is a commit of the served store, so it reaches the live requests of the
connected peers at once.

The protocol is JSON lines.  The client sends one line, at most
:data:`MAX_REQUEST` bytes: ``{"argv": [...], "cwd": "..."}``; the server
answers with lines ``{"out": text}`` and ``{"err": text}`` (the command's
stdout and stderr, in chunks of at most :data:`CHUNK` characters, as they
are written) and a last ``{"exit": status}``.  Each command runs in its own
thread of the serving process (never on the event loop), at most
:data:`MAX_RUNNING` at once; a client must send its request within
:data:`REQUEST_SECONDS` and read what is written within
:data:`SEND_SECONDS`, or its command is cut short.  Only the store's owner
can connect: the socket is mode 0600, and the peer's uid (``SO_PEERCRED``)
must be the server's.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import struct
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from cablestore.errors import TransportError
from cablestore.peer.limits import CHUNK, MAX_LINE, MAX_REQUEST, MAX_RUNNING, REQUEST_SECONDS, SEND_SECONDS

SOCKET_NAME = "cablestore.sock"
_PATH_MAX = 100  # sun_path holds 108 bytes; longer paths are reached through /proc/self/fd

Runner = Callable[[list, str], int]


def socket_path(store_path: str | os.PathLike) -> Path:
    """Where the control socket of a store served from ``store_path`` is."""
    return Path(store_path) / SOCKET_NAME


@contextlib.contextmanager
def _short(path: Path):
    """An address for ``path`` that fits in ``sun_path``: itself, or ``/proc/self/fd/N/NAME`` through its directory."""
    if len(os.fsencode(path)) <= _PATH_MAX:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


class _Routed(io.TextIOBase):
    """``sys.stdout`` / ``sys.stderr`` of the serving process: what a command thread writes goes to its client."""

    def __init__(self, original: TextIO, kind: str, local: threading.local) -> None:
        self.original, self.kind, self.local = original, kind, local

    def _target(self):
        return getattr(self.local, "reply", None)

    def write(self, text: str) -> int:
        reply = self._target()
        if reply is None:
            return self.original.write(text)
        reply.send(self.kind, text)
        return len(text)

    def flush(self) -> None:
        if self._target() is None:
            self.original.flush()

    def isatty(self) -> bool:
        return False if self._target() is not None else self.original.isatty()

    def fileno(self) -> int:
        if self._target() is not None:
            raise io.UnsupportedOperation("a command run through serve writes to its client")
        return self.original.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.original, "encoding", "utf-8")


class _Reply:
    """The lines sent back to one client."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.lock = threading.Lock()

    def send(self, kind: str, value) -> None:
        if isinstance(value, str) and len(value) > CHUNK:
            for i in range(0, len(value), CHUNK):
                self.send(kind, value[i : i + CHUNK])
            return
        line = json.dumps({kind: value}).encode() + b"\n"
        with self.lock:
            try:
                self.conn.sendall(line)
            except OSError as exc:  # the client left or stopped reading: the command is cut short
                raise BrokenPipeError(f"control client gone: {exc}") from None


class ControlServer:
    """Listens on ``STORE/cablestore.sock`` and runs each command with ``run(argv, cwd)`` in a thread.

    ``run`` returns the exit status; what the thread writes to ``sys.stdout``
    and ``sys.stderr`` goes to the client.  Use as a context manager.
    """

    def __init__(self, store_path: str | os.PathLike, run: Runner) -> None:
        self.path = socket_path(store_path)
        self.run = run
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._slots = threading.BoundedSemaphore(MAX_RUNNING)
        self._local = threading.local()
        self._saved: tuple | None = None
        self._workers: set[threading.Thread] = set()

    def __enter__(self) -> ControlServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        """Bind the socket (mode 0600; a stale one left by a killed server is replaced) and accept in a thread."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # we hold the store's lock: no other server can be using it
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with _short(self.path) as address:
                sock.bind(address)
            os.chmod(self.path, 0o600)
            sock.listen(16)
        except OSError as exc:
            sock.close()
            raise TransportError(f"cannot listen on {self.path}: {exc.strerror or exc}") from None
        sock.settimeout(0.2)
        self._sock = sock
        self._saved = (sys.stdout, sys.stderr)
        sys.stdout = _Routed(sys.stdout, "out", self._local)
        sys.stderr = _Routed(sys.stderr, "err", self._local)
        self._thread = threading.Thread(target=self._accept, name="cablestore-control", daemon=True)
        self._thread.start()

    def close(self, wait: float = 10.0) -> None:
        """Stop accepting, remove the socket, wait (up to ``wait`` s) for running commands."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._sock is not None:
            self._sock.close()
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        for worker in list(self._workers):
            worker.join(wait)
        if self._saved is not None:
            sys.stdout, sys.stderr = self._saved
            self._saved = None

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            worker = threading.Thread(target=self._serve, args=(conn,), name="cablestore-control-command", daemon=True)
            self._workers.add(worker)
            worker.start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn:
                if not _same_user(conn):
                    return
                conn.settimeout(REQUEST_SECONDS)
                reply = _Reply(conn)
                try:
                    argv, cwd = _read_request(conn)
                except (OSError, ValueError) as exc:
                    with contextlib.suppress(OSError):
                        reply.send("err", f"cablestore: bad control request: {exc}\n")
                        reply.send("exit", 2)
                    return
                conn.settimeout(SEND_SECONDS)
                if not self._slots.acquire(blocking=False):
                    with contextlib.suppress(OSError):
                        reply.send("err", f"cablestore {argv[0] if argv else ''}: TransportError: the serving process runs {MAX_RUNNING} commands already; try again\n")
                        reply.send("exit", 2)
                    return
                try:
                    self._local.reply = reply
                    try:
                        status = self.run(argv, cwd)
                    except BaseException as exc:  # noqa: BLE001 - a command must never take the server down
                        status = 2
                        with contextlib.suppress(OSError):
                            reply.send("err", f"cablestore: {type(exc).__name__}: {exc}\n")
                    finally:
                        self._local.reply = None
                    with contextlib.suppress(OSError):
                        reply.send("exit", status if isinstance(status, int) else 2)
                finally:
                    self._slots.release()
        finally:
            self._workers.discard(threading.current_thread())


def _same_user(conn: socket.socket) -> bool:
    """The connecting process runs as our uid (``SO_PEERCRED``)."""
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return False
    _, uid, _ = struct.unpack("3i", creds)
    return uid == os.getuid()


def _read_request(conn: socket.socket) -> tuple[list, str]:
    data = bytearray()
    while b"\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            raise ValueError("the request ended before its newline")
        data += chunk
        if len(data) > MAX_REQUEST:
            raise ValueError(f"request over {MAX_REQUEST} bytes")
    request = json.loads(data.split(b"\n", 1)[0])
    argv, cwd = request.get("argv"), request.get("cwd", "")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv) or not isinstance(cwd, str):
        raise ValueError("expected {\"argv\": [str, ...], \"cwd\": str}")
    return argv, cwd


def is_served(store_path: str | os.PathLike | None) -> bool:
    """Whether a running ``serve`` holds the store at ``store_path`` (its control socket answers)."""
    if store_path is None:
        return False
    path = socket_path(store_path)
    if not path.is_socket():
        return False
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(2.0)
    with sock:
        try:
            with _short(path) as address:
                sock.connect(address)
        except OSError:
            return False
    return True


def call(store_path: str | os.PathLike, argv: list, *, cwd: str | None = None, stdout: TextIO | None = None,
         stderr: TextIO | None = None, timeout: float = SEND_SECONDS) -> int | None:
    """Run ``argv`` (a ``cablestore`` command line) in the process serving ``store_path``; return its exit status.

    Its output is written to ``stdout`` and ``stderr`` (default: ours) as it
    comes.  None when no process serves the store (no socket, or a stale one
    nobody listens on).  A server that goes silent for ``timeout`` seconds,
    or answers out of protocol, is a :class:`cablestore.errors.TransportError`.
    """
    path = socket_path(store_path)
    if not path.is_socket():
        return None
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    with sock:
        try:
            with _short(path) as address:
                sock.connect(address)
        except (ConnectionRefusedError, FileNotFoundError):
            return None
        except OSError as exc:
            raise TransportError(f"cannot reach the serving process at {path}: {exc.strerror or exc}") from None
        _io(path, timeout, sock.sendall, json.dumps({"argv": list(argv), "cwd": cwd or os.getcwd()}).encode() + b"\n")
        buf = bytearray()
        while True:
            while b"\n" not in buf:
                chunk = _io(path, timeout, sock.recv, 65536)
                if not chunk:
                    raise TransportError(f"the serving process closed {path} before the command's exit status")
                buf += chunk
                if len(buf) > MAX_LINE and b"\n" not in buf:
                    raise TransportError(f"a reply line from {path} is over {MAX_LINE} bytes")
            line, _, rest = bytes(buf).partition(b"\n")
            buf = bytearray(rest)
            try:
                message = json.loads(line)
                kind, value = next(iter(message.items())) if isinstance(message, dict) and len(message) == 1 else (None, None)
            except ValueError as exc:
                raise TransportError(f"unreadable reply from {path}: {exc}") from None
            if kind == "out" and isinstance(value, str):
                stdout.write(value)  # a closed stdout (`| head`) raises BrokenPipeError, as for any command
            elif kind == "err" and isinstance(value, str):
                stderr.write(value)
            elif kind == "exit" and isinstance(value, int):
                stdout.flush()
                return value
            else:
                raise TransportError(f"unexpected reply from {path}: {line[:80]!r}")


def _io(path: Path, timeout: float, op, arg):
    """One socket operation of the client, its failures as :class:`TransportError`."""
    try:
        return op(arg)
    except TimeoutError:
        raise TransportError(f"the serving process at {path} sent nothing for {timeout:g} s") from None
    except OSError as exc:
        raise TransportError(f"the control connection to {path} failed: {exc.strerror or exc}") from None
