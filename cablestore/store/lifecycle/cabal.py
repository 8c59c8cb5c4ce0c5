"""Which cabal a store belongs to: a digest of its cabal key, kept under ``!local!cabal``.

A cabal key (handshake.md: the Noise psk) keeps a cabal private; a store
serving or syncing one cabal must never take in another's posts.  The first
private serve or sync records a BLAKE2b digest of the key (keyed by a
purpose string, so the digest is no use as the key or for any other
protocol); every later one must give the same key, or
:class:`CabalMismatchError` is raised and nothing is written.  The key
itself is never stored.
"""

from __future__ import annotations

import hashlib
from typing import Any

from cablestore.errors import ArgumentError, CabalMismatchError
from cablestore.keyspace.keys import CABAL_KEY


def cabal_digest(key: bytes) -> bytes:
    """The 32-byte digest a store keeps of a cabal key."""
    if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
        raise ArgumentError("a cabal key is 32 bytes")
    return hashlib.blake2b(bytes(key), digest_size=32, person=b"cablestore-cabal").digest()


def adopt_cabal(db: Any, writer: Any, key: bytes) -> bytes:
    """Record ``key``'s digest if the store (``db``) has none, through ``writer`` (the store's
    :class:`cablestore.store.write.writer.Writer`); raise :class:`CabalMismatchError` if it has another."""
    digest = cabal_digest(key)
    kept = db.get(CABAL_KEY)
    if kept is None:
        with writer.batch(sync=True) as batch:
            kept = batch.get(CABAL_KEY)  # under the lock: another thread may have bound it meanwhile
            if kept is None:
                batch.put(CABAL_KEY, digest)
                kept = digest
    if kept != digest:
        raise CabalMismatchError("this store belongs to another cabal: serve or sync it with that cabal's key (two cabals are never mixed in one store)")
    return digest


def bound_digest(db: Any) -> bytes | None:
    """The digest of the cabal key the store (``db``) is bound to, or None for a store of no private cabal (``Store.cabal_digest``)."""
    return db.get(CABAL_KEY)
