"""Reading the moderation state: roles, hidden users and posts, drops, blocks, and moderation state requests.

A component of :class:`cablestore.Store`.  The state is resolved for
the store's *local user* (moderation.md §4.2.5: the root of authority), whose
public key the store keeps under ``!local!user`` once given; a store without
one applies no one's roles (everyone is a normal user) and no action, but
still stores and serves moderation posts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from cablestore.errors import LocalUserError, QueryError, ReadOnlyStoreError
from cablestore.keyspace.keys import LOCAL_USER_KEY, POSTS, SEED_KEPT, SEED_KEY, HashLike, as_hash, canonical_channel, channel_key, mono_timestamp, unescape
from cablestore.moderation import SEED, format_seed, parse_seed, resolve, seeded_applied
from cablestore.store.handle import Handle
from cablestore.store.lifecycle.inflight import Gate
from cablestore.store.write.resolving import moderation_posts, stored_seed
from cablestore.store.write.writer import Writer
from cablestore.views import actions, blocks, roles
from cablestore.wire.codec import ADMIN, BLOCK, MOD, MODERATION_TYPES, ROLE, decode_post, post_type_of
from cablestore.wire.moderation import ROLE_NAMES

ROLE_WORDS = {ADMIN: "admin", MOD: "mod"}


def adopt_local_user(handle: Handle, writer: Writer, given: HashLike | None) -> bytes | None:
    """The store's local user: the one kept, or ``given`` (kept from now on, the state resolved for it).

    A ``given`` key that differs from the kept one raises :class:`LocalUserError`;
    one a read-only store would have to keep, :class:`ReadOnlyStoreError`.
    A new one is written through the writer's door with the whole moderation
    state resolved for it and acted on (the posts it keeps out are removed,
    and subscribers hear of it).
    """
    kept = handle.db.get(LOCAL_USER_KEY)
    if given is None:
        return kept
    key = local_user_key(given)
    if kept is not None:
        if kept != key:
            raise LocalUserError(f"this store belongs to local user {kept.hex()}, not {key.hex()}")
        return kept
    if handle.readonly:
        raise ReadOnlyStoreError(f"this store has no local user, and a read-only store cannot keep {key.hex()} as one (open it writable once with it)")
    handle.local_user = key  # the state is resolved for it in the batch below
    try:
        with writer.batch(sync=True, resolve=True) as batch:
            batch.put(LOCAL_USER_KEY, key)
    except BaseException:
        handle.local_user = kept
        raise
    return key


def local_user_key(given: HashLike | None) -> bytes | None:
    """``given`` as a 32-byte public key (None stays None); anything else raises :class:`LocalUserError`.

    :class:`cablestore.Store` checks it before the store is opened, so a bad key creates nothing.
    """
    if given is None:
        return None
    try:
        return as_hash(given)
    except (QueryError, ValueError, TypeError) as exc:
        raise LocalUserError(f"local user must be a 32-byte public key (bytes or 64 hex digits): {exc}") from None


def _channel_context(channel: str | None) -> str:
    if channel is None or channel == "":
        return ""
    channel_key(channel)  # a str of valid Unicode, or QueryError
    return canonical_channel(channel)


class ModerationQueries:
    """The moderation state as the local user sees it: reads, and the writes of the seed and the local user (through ``writer``)."""

    def __init__(self, handle: Handle, writer: Writer | None = None, posts: Any = None) -> None:
        self._handle = handle
        self._writer = writer  # None: a reader of a snapshot
        self._posts = posts  # the hash-level reads (cablestore.store.read.hashes.Queries)

    @property
    def db(self) -> Any:
        """The store's open plyvel database (or the snapshot an export reads)."""
        return self._handle.db

    @property
    def local_user(self) -> bytes | None:
        """The store's local user, for whom the state is resolved."""
        return self._handle.local_user

    def get_many(self, hashes: Iterable[HashLike]) -> list[bytes | None]:
        """The posts' bytes (None where not stored), from the store's hash-level reads."""
        return self._posts.get_many(hashes)

    def _table(self, snap, context_key: bytes, prefix_of, context: str) -> tuple[bytes, list[tuple[bytes, bytes]]]:
        """The entries of ``context``, or of the cabal when ``context`` was never resolved on its own."""
        if context and snap.get(context_key) is None:
            context = ""
        prefix = prefix_of(context)
        return prefix, list(snap.iterator(prefix=prefix))

    def set_local_user(self, user: HashLike) -> bytes:
        """Give this open store its local user, as ``Store(path, local_user=user)`` does: kept from now on.

        A store that has one keeps it (the same key is no change); a different
        one raises :class:`LocalUserError` and changes nothing.  The posts
        already held are resolved and acted on for the new local user in one
        WriteBatch, under the write lock (``serve`` runs commands so).
        """
        self._writer.writable()
        return adopt_local_user(self._handle, self._writer, local_user_key(user))

    def seed(self) -> dict[bytes, str]:
        """The moderation seed the store's local user joined with (moderation.md §4.7): public key -> ``"admin"``, ``"mod"`` or ``"user"``."""
        data = self.db.get(SEED_KEY)
        return {k: ROLE_NAMES[r] for k, r in parse_seed(data).items()} if data else {}

    def set_seed(self, seed: bytes) -> dict[bytes, str]:
        """Join with a moderation seed (``<varint role><32-byte key>`` pairs, at most 16): its users' default roles, at once.

        It creates no post/role (§4.7.2): the roles are resolved from it, and an
        admin's role for a seeded user decides instead.  Replaces a seed set
        before.  Returns the seed as :meth:`seed` does.
        """
        self._writer.writable()
        roles = parse_seed(seed)
        with self._writer.batch() as batch:
            batch.put(SEED_KEY, format_seed(roles))
            batch.types.add(ROLE)  # the moderation state changes: resolve it in this WriteBatch
        return self.seed()

    def clear_seed(self) -> None:
        """Revoke the moderation seed: its users are normal users again; what they did that was applied stays applied (§4.7.2)."""
        self._writer.writable()
        with self._writer.batch() as batch:
            current = stored_seed(batch.get)
            if not current.roles:
                return
            state = resolve(self.local_user, moderation_posts(batch.current, lambda h: batch.get(POSTS + h)), current)
            batch.put(SEED_KEPT, b"".join(sorted(seeded_applied(state, current))))
            batch.delete(SEED_KEY)
            batch.types.add(ROLE)

    def roles_from_seed(self, channel: str | None = None) -> set[bytes]:
        """The users whose role in ``channel`` (the cabal when None) comes from the moderation seed, not from a post/role."""
        context = _channel_context(channel)
        with self.db.snapshot() as snap:
            prefix, rows = self._table(snap, roles.context_key(context), roles.role_prefix, context)
        return {key[len(prefix) :] for key, value in rows if roles.decode_role(value).by == SEED}

    def roles(self, channel: str | None = None) -> dict[bytes, str]:
        """Public key -> ``"admin"`` or ``"mod"`` in ``channel`` (the cabal when None); normal users are left out.

        The local user, admin everywhere, is included.
        """
        context = _channel_context(channel)
        with self.db.snapshot() as snap:
            prefix, rows = self._table(snap, roles.context_key(context), roles.role_prefix, context)
        out = {key[len(prefix) :]: ROLE_WORDS[roles.decode_role(value).role] for key, value in rows}
        if self.local_user is not None:
            out[self.local_user] = "admin"
        return out

    def hidden_users(self, channel: str | None = None) -> dict[bytes, bytes]:
        """Public key -> hash of the action hiding them, in ``channel`` (the cabal when None)."""
        context = _channel_context(channel)
        with self.db.snapshot() as snap:
            prefix, rows = self._table(snap, actions.context_key(context), actions.hidden_users_prefix, context)
        return {key[len(prefix) :]: value for key, value in rows}

    def _by_hash(self, prefix: bytes) -> dict[bytes, bytes]:
        return {key[len(prefix) :]: value for key, value in self.db.iterator(prefix=prefix)}

    def hidden_posts(self) -> dict[bytes, bytes]:
        """Post hash -> hash of the action hiding it."""
        return self._by_hash(actions.HIDDEN_POSTS)

    def dropped_posts(self) -> dict[bytes, bytes]:
        """Post hash -> hash of the action dropping it."""
        return self._by_hash(actions.DROPPED_POSTS)

    def dropped_channels(self) -> dict[str, bytes]:
        """Canonical channel name -> hash of the action dropping it."""
        prefix = actions.DROPPED_CHANNELS
        return {unescape(key, len(prefix))[0]: value for key, value in self.db.iterator(prefix=prefix)}

    def blocks(self) -> dict[bytes, dict]:
        """Blocked public key -> ``{"by": block hash, "drop": 0/1, "notify": 0/1}``: the blocks in effect for the local user."""
        rows = {pk: blocks.decode_block(v) for pk, v in self._by_hash(blocks.BLOCKED).items()}
        return {pk: {"by": r.by, "drop": r.drop, "notify": r.notify} for pk, r in rows.items()}

    def kept_out(self) -> dict[bytes, dict]:
        """User -> ``{"by": unblock hash, "before": ms}``: unblocked with ``undrop=0`` after a dropping block."""
        rows = {pk: blocks.decode_since(v) for pk, v in self._by_hash(blocks.KEPT).items()}
        return {pk: {"by": r.by, "before": r.timestamp} for pk, r in rows.items()}

    def unblocks(self) -> dict[bytes, dict]:
        """Unblocked public key -> ``{"by": unblock hash, "undrop": 0/1}``: the unblocks in effect."""
        rows = {pk: blocks.decode_unblock(v) for pk, v in self._by_hash(blocks.UNBLOCKED).items()}
        return {pk: {"by": r.by, "undrop": r.undrop} for pk, r in rows.items()}

    def blocked_by(self) -> dict[bytes, bytes]:
        """Public key of a user whose notified block names the local user -> that block's hash."""
        return {pk: blocks.decode_since(v).by for pk, v in self._by_hash(blocks.BLOCKERS).items()}

    def moderation_state(self, channels: Iterable[str] = (), oldest: int = 0, *, to: bytes | None = None) -> list[bytes]:
        """The hashes answering a moderation state request (moderation.md §5.2.1.1), oldest first.

        Every post/block and post/unblock (whatever ``oldest``); the relevant
        roles and the relevant post/moderation for ``channels`` and for the
        cabal with a timestamp at or after ``oldest`` (compared as numbers);
        roles of users who opted out are not relevant, so never listed;
        never a ``privacy=1`` post, nor a post/block with ``notify=0`` unless
        ``to`` names an authenticated requester it does not block (see :meth:`shareable`).
        """
        if isinstance(channels, (str, bytes)):
            raise QueryError("channels is a list of channel names, not one string")
        if isinstance(oldest, bool) or not isinstance(oldest, int) or oldest < 0:
            raise QueryError(f"oldest is a timestamp in ms (0: all), not {oldest!r}")
        contexts = sorted({""} | {_channel_context(c) for c in channels})
        found: dict[bytes, int] = {}
        with self.db.snapshot() as snap:
            for key, _ in snap.iterator(prefix=blocks.candidates_prefix()):
                found[key[-32:]] = mono_timestamp(key)
            for context in contexts:
                for view in (roles, actions):
                    for key, _ in snap.iterator(prefix=view.relevant_prefix(context)):
                        ts = mono_timestamp(key)
                        if ts >= oldest:
                            found[key[-32:]] = ts
            public = [h for h in found if _is_public(snap.get(POSTS + h), to)]
        return sorted(public, key=lambda h: (found[h], h))

    def _contexts(self, view) -> list[str]:
        """``""`` (the cabal) and every channel ``view`` (roles or actions) resolved on its own, ascending."""
        return [""] + sorted(view.context_of_key(k) for k in self.db.iterator(prefix=view.CONTEXTS, include_value=False))

    def moderation_summary(self) -> dict[str, Any]:
        """The resolved state as JSON-ready data (keys and hashes in hex): what ``cablestore moderation`` prints."""
        contexts, user_contexts = self._contexts(roles), self._contexts(actions)

        def hexed(table: dict) -> dict:
            return {k.hex() if isinstance(k, bytes) else k: v.hex() if isinstance(v, bytes) else v for k, v in table.items()}

        return {
            "local_user": self.local_user.hex() if self.local_user else None,
            "roles": {c or "(cabal)": hexed(self.roles(c)) for c in contexts},
            "roles_from_seed": {c or "(cabal)": sorted(k.hex() for k in self.roles_from_seed(c)) for c in contexts},
            "seed": hexed(self.seed()),
            "hidden_users": {c or "(cabal)": hexed(self.hidden_users(c)) for c in user_contexts},
            "hidden_posts": hexed(self.hidden_posts()),
            "dropped_posts": hexed(self.dropped_posts()),
            "dropped_channels": hexed(self.dropped_channels()),
            "blocks": {k.hex(): {**v, "by": v["by"].hex()} for k, v in self.blocks().items()},
            "unblocks": {k.hex(): {**v, "by": v["by"].hex()} for k, v in self.unblocks().items()},
            "blocked_by": hexed(self.blocked_by()),
            "moderation_posts": len(self.moderation_posts()),
        }

    def is_dropped(self, h: HashLike) -> bool:
        """Whether an applied ``drop post`` names this hash (held or not): it is not requested nor stored."""
        return self.db.get(actions.dropped_post_key(as_hash(h))) is not None

    def channel_dropped(self, channel: str) -> bool:
        """Whether an applied ``drop channel`` keeps ``channel`` out (its posts removed, new ones refused)."""
        return self.db.get(actions.dropped_channel_key(_channel_context(channel))) is not None

    def shareable(self, hashes: Iterable[HashLike], *, to: bytes | None = None) -> list[bytes | None]:
        """Answer a peer's post request: the posts' bytes, ``None`` for those unknown or not to be sent.

        A local-only post (``privacy=1``) never leaves the store (moderation.md
        §4.5).  A ``post/block`` with ``notify=0`` must not reach the blocked
        user (§5.1.4): it goes only to a requester identified by a Cable
        Handshake (``to``: their public key, a user the store knows) whom it
        does not name; a plain peer, or an authenticated unknown user (who
        could be a blocked user under a fresh key), never gets one.  Dropped
        posts and posts of blocked users are not stored, so never answered.
        """
        return [None if blob is None or not _is_public(blob, to) else blob for blob in self.get_many(hashes)]

    def moderation_posts(self) -> list[bytes]:
        """Hashes of every stored post/role, post/moderation, post/block and post/unblock, oldest first."""
        keys = []
        for view in (roles, actions, blocks):
            keys += [k for k, _ in self.db.iterator(prefix=view.candidates_prefix())]
        return [k[-32:] for k in sorted(keys, key=lambda k: (k[-40:-32], k[-32:]))]


def _is_public(blob: bytes | None, to: bytes | None = None) -> bool:
    """A stored post that may leave the store: not ``privacy=1`` (moderation.md §4.5), and
    not a ``notify=0`` block unless ``to`` is an identified requester it does not name.

    Only types 6-9 have a privacy field: the type is read from the header
    without decoding the post (post requests are hot).
    """
    if blob is None:
        return False
    if post_type_of(blob) not in MODERATION_TYPES:
        return True
    post = decode_post(blob)
    if post.privacy == 1:
        return False
    return not (post.post_type == BLOCK and post.notify == 0) or (to is not None and to not in post.recipients)


__all__ = ["ModerationQueries", "adopt_local_user"]


class _SnapshotReader:
    """A LevelDB snapshot read as :class:`ModerationQueries` reads its ``db``: ``snapshot()`` is the snapshot itself, left open."""

    closed = False

    def __init__(self, snap: Any) -> None:
        self._snap = snap

    def get(self, key: bytes, *args: Any, **kw: Any) -> bytes | None:
        return self._snap.get(key, *args, **kw)

    def iterator(self, **kw: Any) -> Any:
        return self._snap.iterator(**kw)

    def snapshot(self) -> contextlib.nullcontext:
        return contextlib.nullcontext(self._snap)


def snapshot_moderation(snap: Any, local_user: bytes | None) -> dict[str, Any]:
    """:meth:`ModerationQueries.moderation_summary` of a LevelDB snapshot: an export's, so it agrees with the posts it exports."""
    handle = Handle("(a snapshot)", _SnapshotReader(snap), readonly=True, sync=False, now=None, gate=Gate())  # reads only: no writer
    handle.local_user = local_user
    return ModerationQueries(handle).moderation_summary()
