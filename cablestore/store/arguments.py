"""Checking what a caller hands :class:`cablestore.Store` before anything is opened or written.

A wrong type or an out-of-range number is the caller's mistake: it raises
:class:`cablestore.errors.ArgumentError` (a ``CableError`` that is also a
``TypeError`` and a ``ValueError``) naming the argument, instead of an
exception of Python, plyvel or libsodium from deep inside, and before a
directory is created.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from cablestore.errors import ArgumentError

POST_BYTES = (bytes, bytearray, memoryview)
MAX_VERIFY_WORKERS = 256  # far more processes than any machine verifies faster with
MAX_CACHE_MB = 1 << 16  # 64 GiB of block cache
MAX_WRITE_BUFFER_MB = 1 << 12  # 4 GiB of memtable


def store_path(path: object) -> Path:
    """``path`` as a ``pathlib.Path``: a ``str``, ``bytes`` or ``os.PathLike`` that is not empty."""
    try:
        text = os.fsdecode(os.fspath(path))
    except TypeError:
        raise ArgumentError(f"a store path is a str or os.PathLike, not {type(path).__name__}") from None
    if not text:
        raise ArgumentError("a store path must not be empty")
    if "\0" in text:
        raise ArgumentError(f"a store path must not contain a NUL character: {text!r}")
    try:
        os.fsencode(text)  # what plyvel is given (a name that is not UTF-8 passes as its bytes)
    except UnicodeEncodeError:
        raise ArgumentError(f"a store path must be a file system name: {text!r}") from None
    return Path(text)


def bounded_int(value: object, name: str, lo: int, hi: int) -> int:
    """``value`` if it is an ``int`` (not a ``bool``) from ``lo`` to ``hi``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ArgumentError(f"{name} must be an integer, not {type(value).__name__}")
    if not lo <= value <= hi:
        raise ArgumentError(f"{name} must be from {lo} to {hi}, got {value}")
    return value


def check_options(*, verify_workers: object, now: object, cache_mb: object, write_buffer_mb: object) -> None:
    """Refuse a ``Store`` option of the wrong type or out of range (see :class:`cablestore.Store`)."""
    bounded_int(verify_workers, "verify_workers", 0, MAX_VERIFY_WORKERS)
    bounded_int(cache_mb, "cache_mb", 0, MAX_CACHE_MB)
    bounded_int(write_buffer_mb, "write_buffer_mb", 1, MAX_WRITE_BUFFER_MB)
    if now is not None and not callable(now):
        raise ArgumentError(f"now must be a callable returning milliseconds (or None), not {type(now).__name__}")


def post_bytes(buf: object) -> bytes:
    """One post's bytes (from ``bytes``, ``bytearray`` or ``memoryview``)."""
    if not isinstance(buf, POST_BYTES):
        raise ArgumentError(f"a post is bytes, not {type(buf).__name__}")
    return bytes(buf)


def post_list(bufs: object) -> list[bytes]:
    """The posts of an ``ingest_many`` call as a list of bytes; refuse one post's bytes or a non-iterable."""
    if isinstance(bufs, (*POST_BYTES, str)):
        raise ArgumentError(f"ingest_many takes an iterable of posts, not one {type(bufs).__name__}; use ingest() for a single post")
    if not isinstance(bufs, Iterable):
        raise ArgumentError(f"ingest_many takes an iterable of posts (bytes), not {type(bufs).__name__}")
    out = []
    for i, buf in enumerate(bufs):
        if not isinstance(buf, POST_BYTES):
            raise ArgumentError(f"post {i} of ingest_many is {type(buf).__name__}, not bytes; nothing was ingested")
        out.append(bytes(buf))
    return out


__all__ = ["bounded_int", "check_options", "post_bytes", "post_list", "store_path"]
