"""A deterministic generator of realistic, signed Cable posts.

The same seed always gives the same bytes: keys come from the seed, Ed25519
signatures are deterministic, and timestamps come from a simulated clock, not
the wall clock.  Mostly ``post/text``, with joins, leaves, topics, name
changes, deletes (some of them deletes of deletes), equal timestamps and a
little clock skew.

Files use the fixture format: records of ``[u32 big-endian length][post]``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import struct
from collections.abc import Iterable, Iterator
from typing import Any

from cablestore.errors import PostsFileError
from cablestore.wire.codec import DELETE, HEADER_FIXED, INFO, JOIN, LEAVE, TEXT, TOPIC, post_hash
from cablestore.wire.crypto import Keypair, make_post

START_TS = 1_700_000_000_000
WORDS = (
    "hello cable peer sync channel topic post delete join leave gossip link hash "
    "über tea ☕ 🍵 日本 ok maybe later offline relay archive néant lol"
).split()
CHANNEL_NAMES = ("general", "Dev-Talk", "ünïcode-☕", "news", "news!2024", "random", "a/b", "help")


def users_for(seed: int, count: int) -> list[Keypair]:
    """The ``count`` deterministic keypairs of workload ``seed``."""
    return [Keypair.from_seed(hashlib.sha256(f"cablestore:{seed}:{i}".encode()).digest()) for i in range(count)]


class _Author:
    def __init__(self, keypair):
        self.keypair = keypair
        self.channels: list[str] = []
        self.live: list[tuple[bytes, int]] = []  # (hash, post type) not deleted yet


class Workload:
    """Iterate to get post bytes; ``Workload(seed, posts)`` is reproducible."""

    def __init__(self, seed: int = 1, posts: int = 1000, users: int | None = None, channels: int | None = None) -> None:
        self.seed = seed
        self.posts = posts
        self.rng = random.Random(seed)
        n_users = users or max(4, min(200, posts // 400))
        n_channels = channels or max(3, min(40, posts // 2000))
        self.authors = [_Author(k) for k in users_for(seed, n_users)]
        self.channels = [CHANNEL_NAMES[i] if i < len(CHANNEL_NAMES) else f"chan-{i}" for i in range(n_channels)]
        self.clock = START_TS
        self.heads: dict[str, bytes] = {}

    def __iter__(self) -> Iterator[bytes]:
        emitted = 0
        for author in self.authors:  # everyone names themselves and joins somewhere
            for buf in self._bootstrap(author):
                if emitted == self.posts:
                    return
                emitted += 1
                yield buf
        while emitted < self.posts:
            yield self._next()
            emitted += 1

    def _tick(self) -> int:
        r = self.rng.random()
        if r < 0.03:
            return self.clock  # an equal timestamp
        self.clock += self.rng.randint(1, 5000)
        if r < 0.04:
            return self.clock - self.rng.randint(1, 3_600_000)  # clock skew
        return self.clock

    def _emit(self, author: _Author, post_type: int, channel: str | None = None, **body) -> bytes:
        links = (self.heads[channel],) if channel in self.heads else ()
        if channel is not None:
            body["channel"] = channel
        buf, _ = make_post(author.keypair, post_type, self._tick(), links, **body)
        h = post_hash(buf)
        if post_type in (TEXT, TOPIC, JOIN, LEAVE):
            self.heads[channel] = h
        author.live.append((h, post_type))
        return buf

    def _bootstrap(self, author: _Author):
        name = f"user{self.authors.index(author)}"
        yield self._emit(author, INFO, info=(("name", name),))
        for channel in self.rng.sample(self.channels, k=min(2, len(self.channels))):
            author.channels.append(channel)
            yield self._emit(author, JOIN, channel)

    def _text(self, n: int) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(n))

    def _next(self) -> bytes:
        author = self.rng.choice(self.authors)
        r = self.rng.random()
        if r < 0.02:
            channel = self.rng.choice(self.channels)
            if channel not in author.channels:
                author.channels.append(channel)
            return self._emit(author, JOIN, channel)
        if r < 0.035 and author.channels:
            channel = author.channels.pop(self.rng.randrange(len(author.channels)))
            return self._emit(author, LEAVE, channel)
        if r < 0.05:
            return self._emit(author, TOPIC, self.rng.choice(self.channels), topic=self._text(self.rng.randint(0, 6)))
        if r < 0.065:
            return self._emit(author, INFO, info=(("name", self._text(1)[:32] or "x"),))
        if r < 0.13 and author.live:
            return self._delete(author)
        channel = self.rng.choice(author.channels or self.channels)
        return self._emit(author, TEXT, channel, text=self._text(self.rng.randint(1, 20)))

    def _delete(self, author: _Author) -> bytes:
        count = 1 if self.rng.random() < 0.9 else min(3, len(author.live))
        picks = []
        for _ in range(count):
            recent = author.live[-50:]
            target = recent[self.rng.randrange(len(recent))]
            author.live.remove(target)
            picks.append(target[0])
        return self._emit(author, DELETE, hashes=tuple(picks))


def generate(seed: int = 1, posts: int = 1000, **kw: Any) -> list[bytes]:
    """``list(Workload(seed, posts, **kw))``: the workload's posts, in order."""
    return list(Workload(seed, posts, **kw))


def write_posts(path: str | os.PathLike, bufs: Iterable[bytes]) -> int:
    """Write posts in the ``[u32 BE length][bytes]`` format; return the count.

    The posts go to a temporary file beside ``path`` that is renamed to
    ``path`` once every post is written: an interrupted run (Ctrl-C, an
    error in ``bufs``) leaves no file, or the one that was there before,
    never a shorter file that reads as a whole one.  A path that cannot be
    written raises :class:`PostsFileError`.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise PostsFileError(f"{path} is a directory, not a posts file")
    head, name = os.path.split(path)
    tmp = os.path.join(head, f".{name}.{os.getpid()}.partial")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        raise PostsFileError(f"cannot write {path}: {exc.strerror or exc}") from exc
    n = 0
    try:
        with open(fd, "wb") as f:
            for buf in bufs:
                f.write(struct.pack(">I", len(buf)))
                f.write(buf)
                n += 1
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise PostsFileError(f"cannot write {path}: {exc.strerror or exc}") from exc
        raise
    return n


# No Cable post is shorter than its fixed header plus a link count, a type
# and a timestamp: a first record claiming fewer bytes means the file is not
# a posts file.  (Later short records are passed on for ingest to refuse.)
MIN_RECORD = HEADER_FIXED + 3


def _bad_record(path, index: int, pos: int, declared: int | None, remaining: int) -> PostsFileError:
    """The error for a record that does not fit: "not a posts file" when it is the first."""
    if index == 0:
        what = f"only {remaining} byte(s)" if declared is None else f"its first record claims {declared} bytes, {remaining} follow"
        return PostsFileError(f"{path} is not a posts file ([u32 big-endian length][post] records): {what}")
    if declared is None:
        return PostsFileError(f"{path}: {remaining} stray byte(s) after record {index} (at byte {pos}); the file is truncated or damaged")
    return PostsFileError(
        f"{path}: record {index + 1} at byte {pos} claims {declared} bytes but {remaining} follow; "
        f"the file is truncated or damaged after {index} good records"
    )


def _records(f, path) -> Iterator[bytes]:
    """Yield each record of an open posts file, refusing anything that does not fit."""
    size = os.fstat(f.fileno()).st_size
    pos = index = 0
    while header := f.read(4):
        if len(header) < 4:
            raise _bad_record(path, index, pos, None, len(header))
        (n,) = struct.unpack(">I", header)
        if n > size - pos - 4 or (index == 0 and n < MIN_RECORD):
            raise _bad_record(path, index, pos, n, size - pos - 4)
        buf = f.read(n)
        if len(buf) < n:  # the file shrank while we read it
            raise _bad_record(path, index, pos, n, len(buf))
        yield buf
        pos += 4 + n
        index += 1


def iter_posts(path: str | os.PathLike, batch: int = 1000) -> Iterator[list[bytes]]:
    """Yield lists of up to ``batch`` posts from a posts file, without reading it whole.

    Raises :class:`PostsFileError` when the file is not a posts file or is
    truncated (each good record before the damage has been yielded by then).
    """
    if batch < 1:
        raise PostsFileError(f"batch must be a positive integer, got {batch!r}")
    with _open_posts(path) as f:
        chunk = []
        for buf in _records(f, path):
            chunk.append(buf)
            if len(chunk) == batch:
                yield chunk
                chunk = []
        if chunk:
            yield chunk


def read_posts(path: str | os.PathLike) -> list[bytes]:
    """Every post of a posts file, in file order.

    Raises :class:`PostsFileError` (and returns nothing) when the file is not
    a posts file, is truncated, or ends with stray bytes.
    """
    with _open_posts(path) as f:
        return list(_records(f, path))


def _open_posts(path: str | os.PathLike):
    """Open a posts file for reading; a missing file, a directory or a refused read is a :class:`PostsFileError`."""
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise PostsFileError(f"{os.fspath(path)} does not exist") from None
    except IsADirectoryError:
        raise PostsFileError(f"{os.fspath(path)} is a directory, not a posts file") from None
    except OSError as exc:
        raise PostsFileError(f"cannot read {os.fspath(path)}: {exc.strerror or exc}") from exc
