"""The recomputation, as pure functions both engines call.

Input is primary data only: ``(hash, blob)`` pairs and tombstones.  Output is
every derived key/value pair, computed by the view modules in
``cablestore.views`` (never re-implemented here).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import blake3

from cablestore import views
from cablestore.errors import CableError, CorruptRecordError
from cablestore.keyspace.keys import DELETED, FACTS, LOCAL, META, POSTS, QUARANTINE, REFUSED, REVERSE
from cablestore.keyspace.records import Indexed, Tombstone
from cablestore.moderation import RELEVANT_TYPES, resolve
from cablestore.store.write.enforcing import refusal
from cablestore.views import search as search_view
from cablestore.wire.codec import DELETE, decode_post, post_hash, post_type_of
from cablestore.wire.crypto import verify_post

PRIMARY_PREFIXES = (POSTS, DELETED, META, LOCAL, QUARANTINE, REFUSED, FACTS)
VIEW_PREFIXES = {v.NAME: v.PREFIX for v in views.VIEWS}
VIEW_PREFIXES[search_view.NAME] = search_view.PREFIX  # opt-in: recomputed only for a store that keeps it
VIEW_PREFIXES["reverse"] = REVERSE  # the links view's linker entries, reported as reverse links
VIEW_NAMES = tuple(VIEW_PREFIXES) + ("unknown",)
FAULT_KINDS = ("bad_hash", "undecodable", "bad_signature", "tombstoned", "unverified_tombstone", "bad_tombstone", "kept_out")
# What a repair does with each fault's record.  Only a post whose deletion is
# proven (its author's post/delete is stored and names it) is removed; every
# other faulty record is moved under QUARANTINE, where nothing reads it and an
# operator can restore it.
REMOVE, SET_ASIDE = "remove", "quarantine"
# A post the moderation state keeps out is removed too: the stored moderation
# posts that keep it out justify it (docs/moderation.md, Enforcement).
REPAIR_ACTION = {kind: SET_ASIDE for kind in FAULT_KINDS} | {"tombstoned": REMOVE, "kept_out": REMOVE}
VERIFIED, UNVERIFIED = "verified", "unverified"


@dataclass(frozen=True)
class Fault:
    """A primary-data fault: the post (or tombstone) is left out of the recomputation.

    ``key`` is the LevelDB key a repair removes.
    """

    hash: bytes
    kind: str
    detail: str = ""
    key: bytes = b""

    def sort_key(self) -> tuple:
        """The order every report lists faults in: by kind, then hash (then key and detail, for ties)."""
        return (self.kind, self.hash, self.key, self.detail)


def is_primary(key: bytes) -> bool:
    return key.startswith(PRIMARY_PREFIXES)


_VIEW_BY_PREFIX = {prefix: name for name, prefix in VIEW_PREFIXES.items()}
assert all(p.count(b"!") == 2 and p.startswith(b"!") for p in _VIEW_BY_PREFIX)  # view_of relies on it


def view_of(key: bytes) -> str:
    """The view a derived key belongs to (``"unknown"`` for a key under no view's prefix)."""
    return _VIEW_BY_PREFIX.get(key[: key.find(b"!", 1) + 1], "unknown")


def bucket(key: bytes, partitions: int) -> int:
    """Which digest bucket a derived key falls in (stable across engines; a spread, not a security hash)."""
    return zlib.crc32(key) % partitions


def partition_of(h: bytes, partitions: int) -> int:
    """The snapshot partition of a post (or tombstone target): a hash prefix."""
    return h[0] * partitions // 256 if h else 0  # a damaged empty key still exports


def classify(h: bytes, blob: bytes, on_target, check_signatures: bool = True, signed: bool | None = None):
    """``(faults, post)``: ``post`` is None if this stored post must not be indexed.

    ``on_target``: ``(tombstone, status)`` pairs for the tombstones naming this
    post, status from :func:`tombstone_status`.  A tombstone that contradicts
    the stored post is a fault of its own; one of the post's author decides
    whether the post is provably deleted or only suspected to be.
    ``signed``: the signature's verdict if it was already checked elsewhere.
    """
    key = POSTS + h
    if post_hash(blob) != h:
        return [Fault(h, "bad_hash", "BLAKE2b of the blob does not match its key", key)], None
    try:
        post = decode_post(blob)
    except CableError as exc:
        return [Fault(h, "undecodable", f"{type(exc).__name__}: {exc}", key)], None
    if check_signatures and not (verify_post(blob) if signed is None else signed):
        return [Fault(h, "bad_signature", "Ed25519 signature does not verify", key)], None
    faults, deleted = [], None
    for tomb, status in on_target:
        if tomb.knows_target and (tomb.author, tomb.post_type, tomb.timestamp) != (post.public_key, post.post_type, post.timestamp):
            faults.append(Fault(h, "bad_tombstone", f"{tomb.by.hex()} contradicts the stored post", DELETED + h + tomb.by))
        elif tomb.deleter == post.public_key and not tomb.retired and deleted != VERIFIED:  # a retired one deletes nothing
            deleted = status
    if deleted == VERIFIED:
        return faults + [Fault(h, "tombstoned", "deleted by its author's stored post/delete", key)], None
    if deleted == UNVERIFIED:
        return faults + [Fault(h, "unverified_tombstone", "a tombstone of its author names it, and no stored post/delete backs it", key)], None
    return faults, post


def tombstone_status(tomb, by_blob: bytes | None):
    """``VERIFIED`` if the stored post/delete ``tomb.by`` names the target and is the deleter's,
    ``UNVERIFIED`` if that delete is not stored (or is itself damaged), a ``bad_tombstone``
    Fault if the stored delete contradicts the tombstone."""
    if by_blob is None or post_hash(by_blob) != tomb.by:
        return UNVERIFIED
    try:
        delete = decode_post(by_blob)
    except CableError:
        return UNVERIFIED
    if delete.post_type == DELETE and delete.public_key == tomb.deleter and tomb.target in delete.hashes:
        return VERIFIED
    return Fault(tomb.target, "bad_tombstone", f"its post/delete {tomb.by.hex()} does not say so", DELETED + tomb.target + tomb.by)


def post_entries(h: bytes, blob: bytes, post, made):
    """``(indexed post, its derived entries)`` for a sound post."""
    ip = Indexed.of(blob, post, h, tuple(sorted(made, key=_by_target)) if made else ())
    return ip, views.entries(ip)


def _by_target(tomb) -> bytes:
    return tomb.target


def recompute_post(h: bytes, blob: bytes, post, made):
    """A sound post's derived entries and latest-group candidates.

    Candidates are ``((view name, group), (rank, hash, blob))``; the rank is
    the mono timestamp unless the view ranks its candidates otherwise.  The
    blob is None where the view's ``latest`` cannot use the post at that rank
    (a linker in a ``links`` group): nothing to carry or decode.
    """
    ip, entries = post_entries(h, blob, post, made)
    candidates = [
        ((view.NAME, group), (rank, h, blob if view.latest_needs_winner(group, rank) else None))
        for view, group, rank in views.ranked_groups(ip)
    ]
    return entries, candidates


def enforcement_rows(local_user: bytes | None, posts, on_target, check_signatures: bool, facts=(), seed=None) -> dict | None:
    """The resolved rows that keep posts out, from the sound moderation posts among ``(hash, blob)`` posts.

    None when nothing can be kept out (no local user, or no moderation post).
    Both engines call it before folding, so :meth:`Fold.add_post` can tell a
    post the state keeps out (a ``kept_out`` fault, removed by a repair).
    """
    if local_user is None:
        return None
    sound = [(h, b) for h, b in posts if post_type_of(b) in RELEVANT_TYPES and classify(h, b, on_target.get(h, ()), check_signatures)[1] is not None]
    if not sound:
        return None
    return dict(resolved_entries(local_user, sound, facts, seed))


def kept_out(h: bytes, post, rows: dict) -> Fault | None:
    """A ``kept_out`` fault when the moderation state (``rows``) keeps this stored post out."""
    why = refusal(rows.get, h, post)
    return None if why is None else Fault(h, "kept_out", f"{type(why).__name__}: {why}", POSTS + h)


def resolved_entries(local_user: bytes | None, posts, facts=(), seed=None) -> list[tuple[bytes, bytes]]:
    """The resolved moderation entries of ``(hash, blob)`` posts and ``(hash, fact)`` facts: what ``cablestore.store.write.resolving`` writes.

    ``facts``: ``cablestore.store.write.resolving.held_facts`` of the store, the
    moderation fields of posts a block removed (primary data, like tombstones).
    ``seed``: the store's moderation seed (``cablestore.store.write.resolving.stored_seed``).
    """
    posts = [(h, decode_post(blob)) for h, blob in posts]
    return views.resolved_entries(resolve(local_user, posts + list(facts), seed))


def newer(a, b):
    """The later of two candidates (ranks are unique within a group)."""
    return a if a[0] >= b[0] else b


def render(view_name: str, group: bytes, candidate) -> list[tuple[bytes, bytes]]:
    """The latest entries of a group whose winning candidate is ``candidate``."""
    rank, h, blob = candidate
    view = views.BY_NAME[view_name]
    if blob is None and not view.latest_needs_winner(group, rank):
        return []
    return view.latest(group, Indexed.of(blob, decode_post(blob), h))


DIGEST_MASK = (1 << 256) - 1


def entry_digest(key: bytes, value: bytes) -> int:
    """One entry's contribution to its bucket digest: blake3 of ``len(key):key value`` (unambiguous), as an integer."""
    return int.from_bytes(blake3.blake3(b"%d:%b%b" % (len(key), key, value)).digest(), "big")


def bucket_digest(entries) -> int:
    """A bucket's digest: the sum mod 2**256 of its entries' digests.

    Order-independent, so each engine adds entries up where it computes
    them (map-side, per partition) and adds partial sums; no entry is ever
    sorted or shuffled to digest its bucket.  Both engines use this one
    definition.
    """
    total = 0
    for key, value in entries:
        total += entry_digest(key, value)
    return total & DIGEST_MASK


def unpack_tombstone(target: bytes, by: bytes, value: bytes):
    """A Tombstone, or a ``bad_tombstone`` Fault when the record is damaged."""
    try:
        return Tombstone.unpack(target, by, value)
    except CorruptRecordError as exc:
        return Fault(target, "bad_tombstone", str(exc), DELETED + target + by)
