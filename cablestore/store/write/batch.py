"""What the indexing of one write transaction knows beyond its writes.

A :class:`cablestore.store.write.txn.Txn` buffers puts and deletes; an
:class:`IndexState` holds, for the indexer (:mod:`cablestore.store.write.indexer`),
everything else one batch learns: the posts it added and removed, the post
types and authors it touched (for the moderation state), the tombstones it
wrote, and the "latest" groups it touched.

"Latest" views are not updated post by post: posts only mark the groups they
touch, and :meth:`IndexState.settle` recomputes each touched group once from
its candidates.  Ingest and delete share that one path, so no view logic is
written twice.  The reads and writes go through the Txn (``get``, ``put``,
``scan``, ``current`` are the Txn's own methods, bound here once).
"""

from __future__ import annotations

from collections import defaultdict

from cablestore.keyspace.keys import DELETED, POSTS, SEARCH_KEY
from cablestore.keyspace.records import Indexed, Tombstone
from cablestore.store.read.hashes import channel_names
from cablestore.store.write.txn import Txn
from cablestore.views import rank, recon
from cablestore.wire.codec import decode_post

_MISSING = object()
ENFORCE_UNREAD = object()  # a batch has not yet looked for moderation rows that keep posts out
WINNER_CACHE_SIZE = 50_000  # groups whose latest candidate a Store remembers (~10 MB)
SUM_CACHE_SIZE = 30_000  # !recon rows whose value a Store remembers (~5 MB)


class _Found(tuple):
    """``(rank, hash)`` of a group's latest candidate as found in the DB (not the winner cache)."""

    __slots__ = ()


class _Unread:
    """A group's winner whose post was not read: ``latest`` is empty for it (``View.latest_needs_winner``)."""

    __slots__ = ("hash",)

    def __init__(self, h: bytes) -> None:
        self.hash = h


class IndexState:
    """The indexing state of one batch, over the Txn ``txn`` that buffers its writes."""

    def __init__(self, txn: Txn, tomb_filter=None, winners=None, link_filter=None, search: bool | None = None, sum_rows=None):
        self.txn = txn
        # The store keeps the search view (``views/search.py``): index and unindex its entries (None: ask the DB).
        self.search = txn.db.get(SEARCH_KEY) is not None if search is None else search
        # The Txn's reads and writes, bound once: the indexer calls them for every post.
        self.get, self.put, self.put_many, self.delete = txn.get, txn.put, txn.put_many, txn.delete
        self.scan, self.current, self.writes = txn.scan, txn.current, txn.writes
        self.types: set[int] = set()  # post types added or removed in this batch
        self.info_authors: set[bytes] = set()  # authors of post/infos added or removed in this batch
        self.enforce_memo = ENFORCE_UNREAD  # the moderation rows read by this batch (cablestore.store.write.enforcing)
        self.enforced: dict[bytes, object] = {}  # post hash -> why the moderation state removed it at commit
        self.author_channels: dict[bytes, set[str]] = {}  # author -> channels of their posts indexed or removed in this batch
        # (view name, group) -> (rank, hash) of the committed latest candidate,
        # or None for a group without one: a seek saved per cached group.
        self._winners = winners
        self._settled: dict[tuple, tuple | None] = {}
        # Answer "no tombstone names this hash" and "no stored post links to
        # it" without a seek (see cablestore.store.write.hashfilter).
        self._tomb_filter = tomb_filter
        self._link_filter = link_filter
        self.deleted: set[bytes] = set()  # post hashes removed in this batch
        self.added: dict[bytes, object] = {}  # post hash -> Post stored in this batch
        self.fresh: set[bytes] = set()  # post hashes the DB did not hold when this batch was offered them
        self._touched: dict[tuple, object] = {}  # (view name, group) -> view
        self._added: dict[tuple, dict[bytes, Indexed]] = defaultdict(dict)
        self._latest_keys: dict[tuple, set[bytes]] = {}
        self._tombs: dict[bytes, dict[bytes, bytes | None]] = defaultdict(dict)
        self.sums: dict[bytes, bytearray] = {}  # the finest !recon buckets' accumulators this batch adds (views/recon.py add), written at commit
        # !recon row -> its committed value (None: no row), kept by the writer across batches: a post
        # a batch (a live peer) rewrites the rows of its buckets without reading them from LevelDB.
        self._sum_rows = sum_rows
        self._sums_written: dict[bytes, bytes | None] = {}

    # --- tombstones (primary data) -------------------------------------
    def tombstones(self, target: bytes) -> list[Tombstone]:
        """The tombstones naming ``target``, as this batch would commit them."""
        if self._tomb_filter is not None and target not in self._tombs and not self._tomb_filter.might_have(target):
            return []
        prefix = DELETED + target
        found = {k[len(prefix) :]: v for k, v in self.scan(prefix)}
        found.update(self._tombs.get(target, {}))
        return [Tombstone.unpack(target, by, v) for by, v in sorted(found.items()) if v is not None]

    def tombstones_by(self, by: bytes, targets) -> list[Tombstone]:
        """The tombstones the post/delete ``by`` made for ``targets``."""
        out = []
        for target in dict.fromkeys(targets):
            value = self.get(DELETED + target + by)
            if value is not None:
                out.append(Tombstone.unpack(target, by, value))
        return out

    def put_tombstone(self, tomb: Tombstone) -> None:
        """Write (or rewrite) a tombstone."""
        value = tomb.pack()
        if self._tomb_filter is not None:
            self._tomb_filter.add(tomb.target)
        self._tombs[tomb.target][tomb.by] = value
        self.put(DELETED + tomb.target + tomb.by, value)

    def forget_tombstone(self, tomb: Tombstone) -> None:
        """Remove a tombstone."""
        self._tombs[tomb.target][tomb.by] = None
        self.delete(DELETED + tomb.target + tomb.by)

    # --- latest groups --------------------------------------------------
    def touch(self, view, group: bytes) -> None:
        """Mark a latest group for :meth:`settle` to recompute."""
        self._touched[(view.NAME, group)] = view

    def add_candidates(self, groups, ip: Indexed) -> None:
        """Make ``ip`` a candidate of each ``(view, group)`` of ``groups`` (and touch the group)."""
        added, touched, h = self._added, self._touched, ip.hash
        for view, group in groups:
            name_group = (view.NAME, group)
            added[name_group][h] = ip
            touched[name_group] = view

    def settle(self) -> None:
        """Rewrite the latest entries of every touched group from its candidates."""
        touched, self._touched = self._touched, {}
        self._settle(touched)

    def settle_groups(self, name: str, groups) -> None:
        """:meth:`settle` just the groups of view ``name`` among ``groups`` that are touched (the others stay touched)."""
        touched = {}
        for group in groups:
            view = self._touched.pop((name, group), None)
            if view is not None:
                touched[(name, group)] = view
        self._settle(touched)

    def _settle(self, touched: dict) -> None:
        for (name, group), view in touched.items():
            winner, winner_rank, exact = self._winner(name, group, view)
            self._settled[(name, group)] = (None if winner is None else (winner_rank, winner.hash)) if exact else _MISSING
            entries = () if type(winner) is _Unread else view.latest(group, winner)
            self._write_latest(name, group, view, entries)

    def _stored_winner(self, name, group, view, cached_ok: bool = True) -> tuple | None:
        """``(rank, hash)`` of the group's latest candidate in the DB, skipping posts deleted in this txn.

        Found in the DB, not the winner cache: a :class:`_Found`, whose post the DB holds.
        """
        if self._winners is not None and cached_ok:
            cached = self._winners.get((name, group), _MISSING)
            if cached is None or (cached is not _MISSING and cached[1] not in self.deleted):
                return cached
        prefix = view.candidates(group)
        register = view.winner_key(group)
        if register is not None:
            return self._register_winner(view, group, register, prefix, cached_ok)
        if view.OWN_CANDIDATE and self._link_filter is not None and not self._link_filter.might_have(group):
            # Nothing stored links to ``group`` (a seek cost 30-40 µs at 1M posts).
            key = None
        else:
            key = self.txn.last_candidate(prefix, self.deleted)
        if key is None and view.OWN_CANDIDATE:
            # No linker: the post itself, if the DB holds it (a point read; none
            # for a post new to the DB, ``fresh``).
            held = group not in self.deleted and group not in self.fresh
            return _Found((b"", group)) if held and self.txn.db.get(POSTS + group) is not None else None
        return None if key is None else _Found((key[len(prefix) :], key[-32:]))

    def _register_winner(self, view, group, register: bytes, prefixes, trusted: bool) -> tuple | None:
        """:meth:`_stored_winner` of a group with a register: one point read of it.

        A bounded reverse seek under each candidate prefix only when its winner was removed in
        this txn (or ``trusted`` is False: the register named a post the DB lacks).
        """
        if trusted:
            value = self.txn.db.get(register)
            if value is None:
                return None
            rank = view.register_rank(group, value)
            if rank is not None and rank[-32:] not in self.deleted:
                return _Found((rank, rank[-32:]))
        best = None
        for prefix in (prefixes,) if type(prefixes) is bytes else prefixes:
            key = self.txn.last_candidate(prefix, self.deleted)
            if key is not None and (best is None or key[len(prefix) :] > best[0]):
                best = (key[len(prefix) :], key[-32:])
        return None if best is None else _Found(best)

    def _winner(self, name, group, view) -> tuple[Indexed | None, bytes, bool]:
        """``(winner, its rank, exact)``; not exact: a stand-in whose ``latest`` equals the winner's."""
        best, best_rank = None, b""
        for ip in self._added.get((name, group), {}).values():
            if ip.hash in self.deleted:
                continue
            ip_rank = rank(view, group, ip)
            if best is None or ip_rank > best_rank:
                best, best_rank = ip, ip_rank
        if best is not None and not view.latest_needs_winner(group, best_rank):
            # Whatever stored candidate outranks it, ``latest`` is empty: no seek
            # (a new post's links to older posts).  The group's winner stays unknown.
            return best, best_rank, False
        stored = self._stored_winner(name, group, view)
        if stored is not None and best is not None and stored[0] <= best_rank:
            # The new candidate wins: the stored winner's bytes are not needed.  (A
            # stale cached winner, removed under the store, only ranked lower.)
            return best, best_rank, True
        if type(stored) is _Found and not view.latest_needs_winner(group, stored[0]):
            # The stored winner stays, and ``latest`` is empty for it (another post still
            # links to a deleted post's link target): its bytes are not read.  Only for a
            # winner just found in the DB: a cached one is checked against the DB below.
            return _Unread(stored[1]), stored[0], True
        blob = None if stored is None else self.get(POSTS + stored[1])
        if stored is not None and blob is None:
            # The cache named a post the DB no longer holds (written under it:
            # a repair, a recovery): forget it and read the DB.
            if self._winners is not None:
                self._winners.pop((name, group), None)
            stored = self._stored_winner(name, group, view, cached_ok=False)
            blob = None if stored is None else self.get(POSTS + stored[1])
        if stored is not None and blob is not None and (best is None or stored[0] > best_rank):
            best, best_rank = Indexed.of(blob, decode_post(blob), stored[1]), stored[0]
        return best, best_rank, True

    def _write_latest(self, name, group, view, entries) -> None:
        # Blind writes: reading a value to skip rewriting it costs more than the write.
        writes, kept = self.writes, set()
        for key, value in entries:
            writes[key] = value
            kept.add(key)
        for stale in (self._stored_latest_keys(view, group), self._latest_keys.get((name, group), ())):
            for key in stale:
                if key not in kept:
                    writes[key] = None  # a delete
        self._latest_keys[(name, group)] = kept

    def _stored_latest_keys(self, view, group: bytes) -> list[bytes]:
        """The keys ``view.latest`` wrote for ``group`` that the DB holds (or may hold: deleting an absent key is harmless)."""
        if view.LATEST_FROM_POST:
            if group in self.fresh:  # a post new to the DB has no latest keys there
                return []
            db = self.txn.db
            return view.latest_keys_from_post(group, db.get(POSTS + group), lambda: channel_names(db))
        known = view.latest_keys(group)
        return known if known is not None else [key for key, _ in self.txn.scan(view.latest_prefix(group))]

    def committed(self):
        """What this txn changed, for listeners (see :mod:`cablestore.store.events`)."""
        from cablestore.store.events import Committed

        added = tuple((h, p) for h, p in self.added.items() if h not in self.deleted)
        removed = tuple(h for h in self.deleted if h not in self.added)
        return Committed(added, removed)

    # --- commit ---------------------------------------------------------
    def _write_sums(self) -> None:
        """The range sums (``views/recon.py``) the batch's posts changed: each row read once and rewritten (or removed, when empty)."""
        sums, self.sums = self.sums, {}
        if sums:
            recon.write_rows(sums, self._sum_rows, self.get, self.writes, self._sums_written)

    def commit(self, sync: bool = False) -> None:
        """Write the Txn (the groups settled, the moderation resolved: :func:`cablestore.store.write.indexer.commit`), then remember the winners."""
        if self._link_filter is not None:  # before the linker entries are written
            for post in self.added.values():
                for target in post.links:
                    self._link_filter.add(target)
        self._write_sums()
        self.txn.commit(sync)
        if self._sum_rows is not None and self._sums_written:  # only once the batch is written
            if len(self._sum_rows) + len(self._sums_written) > SUM_CACHE_SIZE:
                self._sum_rows.clear()
            self._sum_rows.update(self._sums_written)
        if self._winners is not None:  # only once the batch is written
            if len(self._winners) + len(self._settled) > WINNER_CACHE_SIZE:
                self._winners.clear()  # bounded memory; refilled as groups are touched again
            for group, winner in self._settled.items():
                if winner is _MISSING:
                    self._winners.pop(group, None)  # settled without finding out who won
                else:
                    self._winners[group] = winner
