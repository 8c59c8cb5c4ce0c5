"""Posts in and out: validating, ingesting (one post, a batch, a stream of batches), local removal.

:class:`Ingest` is the store's write path for posts; every write it makes
passes through the :class:`cablestore.store.write.writer.Writer`'s door, and its
signature verification may run in worker threads or processes
(``verify_workers``) while the writing thread indexes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from cablestore import views
from cablestore.errors import CableError, QueryError, SignatureError, StoreError
from cablestore.keyspace.keys import LOCAL, POSTS, HashLike, as_hash, channel_key, check_horizon
from cablestore.store import arguments
from cablestore.store.handle import Handle
from cablestore.store.write import indexer
from cablestore.store.write.gcpause import gc_paused
from cablestore.store.write.writer import Writer
from cablestore.wire.codec import CHANNEL_CODEPOINTS, Post, decode_post, post_hash
from cablestore.wire.crypto import THREADED, check_signature, verify_many, verify_pool

VERIFY_AHEAD = 2  # batches ingest_batches has its workers verify ahead of the one it indexes


@dataclass(frozen=True)
class IngestResult:
    """What happened to one post of an ``ingest_many`` call."""

    index: int
    hash: bytes | None
    error: CableError | None = None
    new: bool = False

    @property
    def ok(self) -> bool:
        """True when the post was accepted (stored now or already)."""
        return self.error is None


class Ingest:
    """Validating and storing posts, and removing them locally, through ``writer``."""

    def __init__(self, handle: Handle, writer: Writer, *, verify_signatures: bool = True, verify_workers: int = 0) -> None:
        self._handle = handle
        self._writer = writer
        self.verify_signatures = verify_signatures
        self.verify_workers = verify_workers
        self.verify_pool = None  # made on the first batch that needs it

    def close(self) -> None:
        """Stop the verify workers (the store is closing)."""
        if self.verify_pool is not None:
            self.verify_pool.shutdown(wait=True, cancel_futures=True)
            self.verify_pool = None

    # --- checks -------------------------------------------------------------
    def check_fields(self, buf: bytes, now: int | None) -> tuple[bytes, Post]:
        """Decode ``buf`` and check its timestamp against the horizon; ``(hash, post)``."""
        post = decode_post(buf)
        now = self._handle.now() if now is None else now
        check_horizon(post.timestamp, now)
        return post_hash(buf), post

    def validate(self, buf: bytes, now: int | None = None) -> tuple[bytes, Post]:
        """Decode and check one post as a host must before accepting it; ``(hash, post)`` or a :class:`CableError`."""
        h, post = self.check_fields(buf, now)
        if self.verify_signatures:
            check_signature(buf)
        return h, post

    def _pool(self):
        # One verify thread already overlaps with indexing; one worker process would not pay for its pickling.
        if self.verify_workers > (0 if THREADED else 1) and self.verify_pool is None:
            self.verify_pool = verify_pool(self.verify_workers)
        return self.verify_pool

    def _signatures(self, bufs: list[bytes]) -> Iterator[bool] | None:
        # Verification needs only the bytes: start it first, decode meanwhile.
        return verify_many(bufs, self._pool()) if self.verify_signatures else None

    # --- ingest -------------------------------------------------------------
    def ingest(self, buf: bytes, *, now: int | None = None, extra: dict[bytes, bytes] | None = None) -> bytes:
        """Validate and store one post with all its view entries; return its hash.

        Storing a post already stored is a no-op.  A refused post raises and
        leaves the store unchanged.  ``extra``: more ``!local!`` keys to write
        in the same WriteBatch (an author's clock, a sync cursor), so they
        land with the post or not at all.
        """
        self._writer.writable()
        buf = arguments.post_bytes(buf)
        h, post = self.validate(buf, now)
        with self._writer.batch() as batch:
            outcome = indexer.apply(batch, buf, h, post)
            for key, value in (extra or {}).items():
                if not key.startswith(LOCAL):
                    raise StoreError(f"extra keys live under {LOCAL!r}, not {key[:16]!r}")
                batch.put(key, value)
        if isinstance(outcome, CableError):
            raise outcome
        if h in batch.enforced:  # stored, then kept out by the moderation state it changed
            raise batch.enforced[h]
        return h

    def ingest_many(self, bufs: Iterable[bytes], *, now: int | None = None, listings: Iterable[tuple[str, HashLike]] = ()) -> list[IngestResult]:
        """Ingest posts in order, in one WriteBatch; refusals are reported per item.

        With ``verify_workers``, signatures are verified by that many workers
        while this thread indexes the posts already checked.  ``listings``:
        ``(channel, hash)`` pairs a peer listed, recorded as :meth:`learn_listing`
        after the posts would, in the same WriteBatch (a post/delete among
        them learns its channels as it is indexed, not re-indexed after).
        """
        self._writer.writable()
        listed: dict[bytes, tuple[str, ...]] = {}
        for channel, h in listings:
            self._check_listing_channel(channel)
            h = as_hash(h)
            listed[h] = (*listed.get(h, ()), channel)
        with gc_paused():  # a batch's objects make no cycles: see cablestore.store.write.gcpause
            bufs = arguments.post_list(bufs)
            return self._ingest_checked(bufs, self._signatures(bufs), now, listed)

    def ingest_batches(self, batches: Iterable[Iterable[bytes]], *, now: int | None = None) -> Iterator[list[IngestResult]]:
        """:meth:`ingest_many` of each batch in turn (one WriteBatch each), yielding each batch's results.

        With ``verify_workers`` the workers check the next batches'
        signatures (``VERIFY_AHEAD`` of them) while this thread indexes the
        current one, so neither waits for the other between batches;
        ``VERIFY_AHEAD + 1`` batches are held at most.
        A bad batch (not a list of bytes) raises when it is reached: the
        batches before it are stored.
        """
        self._writer.writable()
        pending: deque = deque()
        for batch in batches:
            bufs = arguments.post_list(batch)
            pending.append((bufs, self._signatures(bufs)))  # the workers start on it now
            if len(pending) > VERIFY_AHEAD:
                with gc_paused():  # not across the yield: the caller's code runs with the collector on
                    results = self._ingest_checked(*pending.popleft(), now)
                yield results
        while pending:
            with gc_paused():
                results = self._ingest_checked(*pending.popleft(), now)
            yield results

    def _ingest_checked(self, bufs: list[bytes], signatures: Iterator[bool] | None, now: int | None, listed: dict | None = None) -> list[IngestResult]:
        now = self._handle.now() if now is None else now
        checked = []
        for i, buf in enumerate(bufs):
            try:
                checked.append((i, buf, *self.check_fields(buf, now), None))
            except CableError as exc:
                checked.append((i, buf, None, None, exc))
        results = []
        with self._writer.batch() as batch:
            for i, buf, h, post, error in checked:
                signed = next(signatures) if signatures is not None else True
                if error is None and not signed:
                    error = SignatureError("Ed25519 signature does not verify")
                if error is None:
                    listing = listed.pop(h, ()) if listed else ()
                    try:
                        outcome = indexer.apply(batch, buf, h, post, listing)
                        for channel in listing if outcome is False else ():  # held already: as learn_listing
                            indexer.learn_listing(batch, h, channel)
                    except CableError as exc:
                        outcome = exc
                    if not isinstance(outcome, CableError):
                        results.append(IngestResult(i, h, None, outcome))
                        continue
                    error = outcome
                results.append(IngestResult(i, h, error))
            for h, channels in (listed or {}).items():  # not among the posts, or refused before indexing: as learn_listing
                for channel in channels:
                    indexer.learn_listing(batch, h, channel)
        # A post stored early in the batch and kept out by a moderation post later in it is not stored.
        return [IngestResult(r.index, r.hash, batch.enforced[r.hash]) if r.ok and r.hash in batch.enforced else r for r in results]

    def learn_listing(self, channel: str, hashes: Iterable[HashLike]) -> int:
        """Record that a peer listed these posts in ``channel``'s time range; return how many deletes that re-listed.

        A post/delete names no channel: it is listed under the channels of
        the posts it deleted.  A store that never held those posts learns
        the channel only from the peer that listed the delete, so the sync
        layer passes it on here.  Posts that are not stored post/deletes,
        and deletes whose targets the store knows, are left as they are.
        """
        self._writer.writable()
        hashes = [as_hash(h) for h in hashes]
        self._check_listing_channel(channel)
        with self._writer.batch() as batch:
            learned = sum(indexer.learn_listing(batch, h, channel) for h in hashes)
        return learned

    @staticmethod
    def _check_listing_channel(channel: str) -> None:
        channel_key(channel)  # a bad name is the caller's error, before any write
        lo, hi = CHANNEL_CODEPOINTS
        if not lo <= len(channel) <= hi:
            raise QueryError(f"a channel name has {lo} to {hi} codepoints, not {len(channel)}")

    # --- local removal ------------------------------------------------------
    def delete(self, h: HashLike) -> bool:
        """Discard a post locally, without a post/delete and without a tombstone.

        Returns False if the post was not stored.  Tombstones a discarded
        post/delete made are kept: the deletion it carried still holds, and a
        later post/delete of the discarded delete cannot lift it (the store no
        longer holds the delete, so it cannot tell what it targeted).
        """
        self._writer.writable()
        h = as_hash(h)
        with self._writer.batch() as batch:
            blob = batch.get(POSTS + h)
            if blob is None:
                return False
            indexer.unindex(batch, h, blob, forget_tombstones=False)
        return True

    def purge_author(self, public_key: HashLike) -> int:
        """Remove every post an author wrote (for blocking); return how many."""
        self._writer.writable()
        public_key = as_hash(public_key)
        with self._writer.batch() as batch:
            prefix = views.author.prefix(public_key)
            hashes = [k[-32:] for k in self._handle.db.iterator(prefix=prefix, include_value=False)]
            for h in hashes:
                blob = batch.get(POSTS + h)
                if blob is not None:
                    indexer.unindex(batch, h, blob, forget_tombstones=False)
        return len(hashes)


__all__ = ["Ingest", "IngestResult", "VERIFY_AHEAD"]
