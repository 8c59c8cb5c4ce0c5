"""A deterministic generator of realistic, signed Cable posts.

The same seed always gives the same bytes: keys come from the seed, Ed25519
signatures are deterministic, and timestamps come from a simulated clock, not
the wall clock.  Mostly ``post/text``, with joins, leaves, topics, name
changes, deletes (some of them deletes of deletes), equal timestamps and a
little clock skew.

Files use the fixture format: records of ``[u32 big-endian length][post]``.
"""

from __future__ import annotations

import hashlib
import random
import struct
from pathlib import Path

from .codec import DELETE, INFO, JOIN, LEAVE, TEXT, TOPIC, post_hash
from .crypto import Keypair, make_post
from .errors import TruncatedError

START_TS = 1_700_000_000_000
WORDS = (
    "hello cable peer sync channel topic post delete join leave gossip link hash "
    "über tea ☕ 🍵 日本 ok maybe later offline relay archive néant lol"
).split()
CHANNEL_NAMES = ("general", "Dev-Talk", "ünïcode-☕", "news", "news!2024", "random", "a/b", "help")


def users_for(seed: int, count: int) -> list[Keypair]:
    return [Keypair.from_seed(hashlib.sha256(f"cablestore:{seed}:{i}".encode()).digest()) for i in range(count)]


class _Author:
    def __init__(self, keypair):
        self.keypair = keypair
        self.channels: list[str] = []
        self.live: list[tuple[bytes, int]] = []  # (hash, post type) not deleted yet


class Workload:
    """Iterate to get post bytes; ``Workload(seed, posts)`` is reproducible."""

    def __init__(self, seed: int = 1, posts: int = 1000, users: int | None = None, channels: int | None = None):
        self.seed = seed
        self.posts = posts
        self.rng = random.Random(seed)
        n_users = users or max(4, min(200, posts // 400))
        n_channels = channels or max(3, min(40, posts // 2000))
        self.authors = [_Author(k) for k in users_for(seed, n_users)]
        self.channels = [CHANNEL_NAMES[i] if i < len(CHANNEL_NAMES) else f"chan-{i}" for i in range(n_channels)]
        self.clock = START_TS
        self.heads: dict[str, bytes] = {}

    def __iter__(self):
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


def generate(seed: int = 1, posts: int = 1000, **kw) -> list[bytes]:
    return list(Workload(seed, posts, **kw))


def write_posts(path, bufs) -> int:
    """Write posts in the ``[u32 BE length][bytes]`` format; return the count."""
    n = 0
    with open(path, "wb") as f:
        for buf in bufs:
            f.write(struct.pack(">I", len(buf)))
            f.write(buf)
            n += 1
    return n


def iter_posts(path, batch: int = 1000):
    """Yield lists of up to ``batch`` posts from a posts file, without reading it whole."""
    with open(path, "rb") as f:
        chunk = []
        while header := f.read(4):
            if len(header) < 4:
                raise TruncatedError(f"{path}: truncated record header")
            (n,) = struct.unpack(">I", header)
            buf = f.read(n)
            if len(buf) < n:
                raise TruncatedError(f"{path}: truncated record")
            chunk.append(buf)
            if len(chunk) == batch:
                yield chunk
                chunk = []
        if chunk:
            yield chunk


def read_posts(path) -> list[bytes]:
    data = Path(path).read_bytes()
    out, pos = [], 0
    while pos < len(data):
        (n,) = struct.unpack_from(">I", data, pos)
        out.append(data[pos + 4 : pos + 4 + n])
        pos += 4 + n
    if pos != len(data):
        raise TruncatedError(f"{path}: truncated record at byte {pos}")
    return out
