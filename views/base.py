"""The contract every view meets: :class:`View`, with a default for each part.

As diskcache's ``Disk``: one class states every question the store and the
rebuild ask a view, with the answer most views give; a view overrides only
what it answers otherwise.  Each module of ``views/`` defines its key layout
as module-level functions and ends with one subclass naming the ones that
answer these questions, and ``VIEW``, its one instance.

Views are pure: every method receives data (an indexed post, a group, a
winner) and returns keys and values; none reads the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


class View:
    """A materialized view: the entries each post adds, and for views with "latest" groups, how a group's latest entries follow from its winner."""

    NAME = ""
    """The view's name (reports, the rebuild's shuffle keys)."""
    PREFIX = b""
    """The key prefix every entry of the view starts with (from :mod:`cablestore.keyspace.keys`)."""
    RESOLVED_PREFIXES: tuple[bytes, ...] = ()
    """Views resolved from the whole set of moderation posts: the prefixes :meth:`resolved` writes under (replaced whole)."""
    LATEST_FROM_POST = False
    """True: the keys ``latest`` wrote for a group are named by the stored post the group names (:meth:`latest_keys_from_post`)."""
    OWN_CANDIDATE = False
    """True: the post a group names (the group is its hash) is itself a candidate of rank ``b""`` while it is stored."""
    BULK_PREFIX = b""
    """With :attr:`BULK_LATEST`: the prefix of the view's own entries :meth:`bulk_latest` reads."""
    BULK_LATEST = False
    """True: :meth:`bulk_latest` gives every group's latest entries at once (a bulk reindex holds no candidate per group)."""

    # --- per post -----------------------------------------------------------
    def entries(self, ip) -> list[tuple[bytes, bytes]]:
        """The entries one indexed post contributes (for a post/delete, from the tombstones it made too)."""
        return []

    def groups(self, ip) -> list[bytes]:
        """The "latest" groups the post competes in."""
        return []

    # --- latest groups ------------------------------------------------------
    def candidates(self, group: bytes) -> bytes | tuple[bytes, ...]:
        """The key prefix under which every post of ``group`` has one entry ending in its rank: the latest is one reverse seek away.

        Or a tuple of prefixes: the latest is the greatest rank of one reverse seek under each (a bounded number).
        """
        raise NotImplementedError(f"view {self.NAME!r} has no latest groups")

    def winner_key(self, group: bytes) -> bytes | None:
        """The key of a register whose value names the group's winner (written by :meth:`latest`), read instead of seeking :meth:`candidates`; None (the default): no register."""
        return None

    def register_rank(self, group: bytes, value: bytes) -> bytes | None:
        """With :meth:`winner_key`: the winner's rank (it ends in the winner's hash) from the register's value; None: a damaged value (the candidates decide)."""
        raise NotImplementedError(f"view {self.NAME!r} has no registers")

    def rank(self, group: bytes, ip) -> bytes:
        """The suffix of the post's candidate key after :meth:`candidates`: the highest is the latest.  Default: the mono timestamp."""
        return ip.mono

    def latest(self, group: bytes, winner) -> list[tuple[bytes, bytes]]:
        """The entries of ``group`` given its latest post (None: no post left)."""
        return []

    def latest_needs_winner(self, group: bytes, rank: bytes) -> bool:
        """False when :meth:`latest` is empty for every winner of ``rank`` or higher: the winner's post need not be read."""
        return True

    def latest_prefix(self, group: bytes) -> bytes:
        """The prefix every key :meth:`latest` can write for ``group`` starts with."""
        raise NotImplementedError(f"view {self.NAME!r} has no latest groups")

    def latest_keys(self, group: bytes) -> list[bytes] | None:
        """The keys :meth:`latest` may have written for ``group``, when known without reading; None (the default): the stored keys under :meth:`latest_prefix`."""
        return None

    def latest_keys_from_post(self, group: bytes, blob: bytes | None, channel_names: Callable[[], Iterable[str]]) -> list[bytes]:
        """With :attr:`LATEST_FROM_POST`: the keys :meth:`latest` may have written, from the stored post ``group`` names.

        ``blob``: its bytes (None: not stored); ``channel_names()``: every channel, for a post too damaged to name its own.
        """
        raise NotImplementedError(f"view {self.NAME!r} does not name its latest keys from posts")

    def bulk_latest(self, post_keys: Iterable[bytes], linker_keys: Iterable[bytes], get: Callable[[bytes], bytes], skip=frozenset()) -> Iterable[tuple[bytes, bytes]]:
        """With :attr:`BULK_LATEST`: every group's :meth:`latest` entries at once, from the ``!post!`` keys and the view's own keys.

        Both in key order; ``get`` reads a value; ``skip``: hashes of stored posts that are not indexed.
        """
        raise NotImplementedError(f"view {self.NAME!r} has no bulk latest")

    # --- resolved views (the moderation state) -------------------------------
    def candidates_prefix(self) -> bytes:
        """Resolved views: where their posts' per-post entries are, so the store can find them all."""
        raise NotImplementedError(f"view {self.NAME!r} is not resolved")

    def resolved(self, state) -> list[tuple[bytes, bytes]]:
        """Resolved views: the entries a :class:`cablestore.moderation.State` gives."""
        return []

    def __repr__(self) -> str:
        return f"<view {self.NAME}>"
