"""Key encoding shared by the store, the views and the rebuild.

Keys are bytes: a readable ASCII prefix naming the view, then binary
components.  Three rules keep them deterministic and unambiguous
(see KEYSPACE.md for the full table):

* Monotonic timestamp (``mono``): the claimed timestamp as 8 big-endian bytes,
  then the post's 32-byte hash.  It sorts numerically for every u64 (a
  10-digit timestamp sorts before a 13-digit one), ties are broken by hash,
  and no two posts can share one.  It never depends on arrival order.
* Channel names are case-insensitive (spec 5.4.1): keys hold the canonical
  caseless form (:func:`canonical_channel`: NFD, casefold, NFC, so the
  composed and decomposed spellings of one name are one channel), UTF-8,
  with NUL escaped as ``00 ff`` and a ``00 01`` terminator.  The escape keeps byte order equal to name order, and the
  terminator means the prefix for channel ``a`` never matches ``a!b`` or
  ``a\\x00b``.
* Public keys and hashes are fixed-width raw bytes, so they need no escape.
"""

from __future__ import annotations

import functools
import unicodedata

# --- key prefixes: every key a store writes starts with one of these (KEYSPACE.md) ---
# Primary data.
POSTS = b"!post!"  # <hash> -> the post's bytes
DELETED = b"!deleted!"  # <target><by> -> a tombstone (cablestore.keyspace.records.Tombstone)
# Neither primary nor derived: skipped by the rebuild.
META = b"!meta!"
FORMAT_KEY = META + b"format"  # the store's format, checked on open
SEARCH_KEY = META + b"search"  # present: the store keeps the search view (``Store(search=True)``)
LOCAL = b"!local!"  # this peer's own state (clock, sync cursors, local user)
LOCAL_USER_KEY = LOCAL + b"user"  # whose moderation state the store resolves
SEED_KEY = LOCAL + b"seed"  # the moderation seed the local user joined with (moderation.md §4.7), as its bytes
SEED_KEPT = LOCAL + b"seeded"  # hashes of seeded users' posts applied when a seed was cleared: they stay applied
CHECKED = LOCAL + b"checked"  # what the last `check --repair` found and when (rebuild.verify.last_check)
REINDEXING = LOCAL + b"reindexing"  # present while a reindex runs: one left behind marks a reindex interrupted
MIGRATING = LOCAL + b"migrating"  # present while a migration to the current format runs (cablestore.rebuild.migrate)
CABAL_KEY = LOCAL + b"cabal"  # a digest of the cabal key the store belongs to (never the key)
CLOCK = LOCAL + b"clock!"  # <pubkey> -> the last timestamp this peer gave a post of that author
LOST = LOCAL + b"lost!"  # <hash> -> what recover knew of a post it found gone (listed until the post comes back)
SYNC_CURSORS = LOCAL + b"sync!"  # <peer><ch> -> where the next sync of a channel from a peer starts
REFUSED = b"!refused!"  # <hash> -> the author of a post/delete refused as unauthorized (see the indexer)
QUARANTINE = b"!quarantine!"  # <original key> -> a record a repair set aside
FACTS = b"!facts!"  # <hash> -> what the moderation state needs of a post a block removed (keyspace/facts.py)
# Derived: the views (``views/``).
REVERSE = b"!rev!"  # reverse links: <target>l<hash> (views/links.py); format 1 also kept <hash> -> fields
CHAT = b"!chat!"
STATE = b"!state!"
AUTHOR = b"!author!"
USER = b"!user!"
CHANNEL = b"!channel!"
LINKS = b"!links!"
ROLES = b"!roles!"
ACTIONS = b"!actions!"
BLOCKS = b"!blocks!"
RECON = b"!recon!"  # per channel and time bucket, the count and sum of the !chat rows' hashes (views/recon.py)
SEARCH = b"!search!"  # the full-text index: only in a store with search enabled (``views/search.py``)

# --- time --------------------------------------------------------------
WEEK_MS = 7 * 24 * 60 * 60 * 1000
"""How far ahead of ``now`` a post's timestamp may be: one at or beyond ``now + WEEK_MS`` is refused."""


def beyond_horizon(timestamp: int, now: int) -> bool:
    """True when a post timestamped ``timestamp`` is too far in the future to accept at ``now`` (ms)."""
    return timestamp >= now + WEEK_MS


def check_horizon(timestamp: int, now: int) -> None:
    """Raise :class:`cablestore.errors.FutureTimestampError` when :func:`beyond_horizon`."""
    if beyond_horizon(timestamp, now):
        from cablestore.errors import FutureTimestampError

        raise FutureTimestampError(f"timestamp {timestamp} is at or beyond now + 7 days")


MONO_SIZE = 40  # 8-byte timestamp + 32-byte hash
TS_SIZE = 8
HASH_SIZE = 32

_TERM = b"\x00\x01"
_NUL_ESC = b"\x00\xff"


HashLike = bytes | bytearray | str
"""A 32-byte hash or public key: raw bytes, or 64 hex characters."""


def mono(timestamp: int, post_hash: bytes) -> bytes:
    """The monotonic timestamp key component: 8 big-endian timestamp bytes, then the hash."""
    return timestamp.to_bytes(TS_SIZE, "big") + post_hash


def mono_hash(key: bytes) -> bytes:
    """The hash at the end of a key that ends in a mono timestamp."""
    return key[-HASH_SIZE:]


def mono_timestamp(key: bytes) -> int:
    """The claimed timestamp in a key that ends in a mono timestamp."""
    return int.from_bytes(key[-MONO_SIZE:-HASH_SIZE], "big")


@functools.lru_cache(maxsize=4096)  # a few names, canonicalized for every post and every request
def canonical_channel(name: str) -> str:
    """The spelling under which a channel is keyed and listed: ``NFC(casefold(NFD(name)))``.

    Unicode's canonical caseless match: names equal but for case (spec 5.4.1)
    or for how their accents are encoded (``"é"`` as one codepoint or as
    ``e`` and a combining accent) are one channel.  Stores written by 0.1.0
    keyed ``name.casefold()``; that differs only for names whose casefold is
    not in NFC, and ``cablestore check`` reports those keys (``cablestore
    reindex`` rewrites them).
    """
    if name.isascii():
        return name.lower()
    return unicodedata.normalize("NFC", unicodedata.normalize("NFD", name).casefold())


@functools.lru_cache(maxsize=4096)  # a few channel names, escaped for every view of every post
def escape(text: str) -> bytes:
    """Order-preserving, self-delimiting encoding of a string component."""
    return text.encode("utf-8").replace(b"\x00", _NUL_ESC) + _TERM


def channel_key(name: str) -> bytes:
    """The key component of a channel name a caller gave (checked: a query argument)."""
    from cablestore.errors import QueryError

    if not isinstance(name, str):
        raise QueryError(f"a channel name is a str, not {type(name).__name__}")
    try:
        return escape(canonical_channel(name))
    except UnicodeEncodeError as exc:
        raise QueryError(f"channel name {name!r} is not valid Unicode text") from exc


def unescape(buf: bytes, pos: int = 0) -> tuple[str, int]:
    """Decode an escaped component at ``pos``; return ``(text, end_pos)``."""
    # Escaped text holds 00 only as 00 ff (and UTF-8 never holds ff), so the
    # first 00 01 is the terminator.
    from cablestore.errors import CorruptRecordError

    try:
        end = buf.index(_TERM, pos)
        return buf[pos:end].replace(_NUL_ESC, b"\x00").decode("utf-8"), end + len(_TERM)
    except ValueError as exc:  # no terminator, or not UTF-8 (UnicodeDecodeError is a ValueError)
        raise CorruptRecordError(f"damaged key {bytes(buf[:48])!r}: {exc}; Store.check(fix=True) sets it aside") from exc


def next_prefix(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with ``prefix``."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        raise ValueError("prefix has no successor")
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def as_hash(value: HashLike) -> bytes:
    """Accept a 32-byte hash (or public key) as bytes or as a hex string."""
    from cablestore.errors import QueryError

    if isinstance(value, str):
        try:
            value = bytes.fromhex(value)
        except ValueError as exc:
            raise QueryError(f"not a hex string: {value!r}") from exc
    if not isinstance(value, (bytes, bytearray)) or len(value) != 32:
        raise QueryError("expected 32 bytes (or 64 hex characters)")
    return bytes(value)
