"""Every user a store knows, for operators: who they are, what they may do, what is done to them.

:meth:`UserQueries.users` lists each author of a stored post and each user a resolved role, hide or
block names: full key, current name, roles per context, the contexts they are hidden in, their block,
their ``accept-role`` and how many posts of theirs the store holds.  :meth:`UserQueries.user_labels`
names users for people: by name, and when two users share a name (compared casefolded: ``Alice`` and
``alice`` look alike), by the name and as many hex digits of the key as tell them apart.  A component of
:class:`cablestore.store.store.Store`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cablestore.errors import UserNotFoundError
from cablestore.keyspace.keys import HashLike, as_hash, next_prefix
from cablestore.store.handle import Component, Handle
from cablestore.views import actions as actions_view
from cablestore.views import author as author_view
from cablestore.views import roles as roles_view
from cablestore.views import user as user_view
from cablestore.wire.codec import ACCEPT_ROLE, ACCEPT_ROLE_VALUES

KEY_DIGITS = 8  # hex digits of a key shown beside a name shared with another user, at least
MIN_PREFIX = 8  # hex digits a key's prefix names a user with, at least (as `users` and `show` print the label)
_HEX = frozenset("0123456789abcdef")
_MAX_LISTED = 10  # candidates an ambiguous name lists


@dataclass(frozen=True, slots=True)
class UserSummary:
    """One user as ``cablestore users`` lists them.

    ``roles``: context (``""``: the cabal, else a canonical channel name) -> ``"admin"`` or ``"mod"``;
    ``hidden_in``: the contexts they are hidden in; ``blocked``: ``{"drop": 0/1, "notify": 0/1}`` while a
    block of the local user's stands, else None; ``accept_role``: 0 (declines roles), 1 or None (not set);
    ``label``: how people are shown the user (see :func:`labels`).
    """

    public_key: bytes
    name: str | None
    label: str
    roles: dict[str, str]
    hidden_in: tuple[str, ...]
    blocked: dict | None
    accept_role: int | None
    posts: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the key in hex, the cabal context as ``"(cabal)"``."""
        return {
            "public_key": self.public_key.hex(),
            "name": self.name,
            "label": self.label,
            "roles": {c or "(cabal)": r for c, r in self.roles.items()},
            "hidden_in": [c or "(cabal)" for c in self.hidden_in],
            "blocked": self.blocked,
            "accept_role": self.accept_role,
            "posts": self.posts,
        }


def labels(names: dict[bytes, str | None], wanted: Iterable[bytes] | None = None) -> dict[bytes, str]:
    """How to show each user of ``wanted`` (default: all of ``names``), given every known user's name.

    A name no other user has (casefolded) is shown alone; a shared one as ``name [hex]``, with at least
    :data:`KEY_DIGITS` digits of the key and as many more as tell the sharers apart; no name, as the
    first :data:`KEY_DIGITS` digits of the key.
    """
    sharing: dict[str, list[bytes]] = {}
    for pk, name in names.items():
        if name is not None:
            sharing.setdefault(name.casefold(), []).append(pk)
    out = {}
    for pk in names if wanted is None else wanted:
        name = names.get(pk)
        if name is None:
            out[pk] = pk.hex()[:KEY_DIGITS]
            continue
        group = sharing[name.casefold()]
        if len(group) == 1:
            out[pk] = name
            continue
        digits = KEY_DIGITS
        while len({other.hex()[:digits] for other in group}) < len(group):
            digits += 2
        out[pk] = f"{name} [{pk.hex()[:digits]}]"
    return out


def _names(snap) -> dict[bytes, str | None]:
    """Every user with a post/info -> their current name (None: their post/info sets none)."""
    out: dict[bytes, str | None] = {}
    with snap.iterator(prefix=user_view.PREFIX, include_value=False) as it:
        for key in it:
            pk = user_view.user_of_key(key)
            value = snap.get(user_view.property_key(pk, "name"))
            out[pk] = None if value is None else value.decode("utf-8", "replace")
            it.seek(next_prefix(user_view.user_prefix(pk)))
    return out


def _post_counts(snap) -> dict[bytes, int]:
    """Every author -> how many of their posts the store holds (a scan of ``!author`` keys)."""
    out: dict[bytes, int] = {}
    with snap.iterator(prefix=author_view.PREFIX, include_value=False) as it:
        for key in it:
            pk = author_view.author_of_key(key)
            out[pk] = out.get(pk, 0) + 1
    return out


class UserQueries(Component):
    """The users a store knows: labels, and a summary per user. ``moderation``: the store's
    :class:`cablestore.store.read.moderation.ModerationQueries` (roles, hidden users, blocks)."""

    def __init__(self, handle: Handle, moderation: Any) -> None:
        super().__init__(handle)
        self._moderation = moderation

    def user_labels(self, public_keys: Iterable[HashLike]) -> dict[bytes, str]:
        """Public key -> how to show that user to people (:func:`labels`: a shared name gets key digits)."""
        wanted = [as_hash(pk) for pk in public_keys]
        with self.db.snapshot() as snap:
            names = _names(snap)
        for pk in wanted:
            names.setdefault(pk, None)
        return labels(names, wanted)

    def resolve_user(self, who: str | HashLike) -> bytes:
        """The public key of the user ``who`` names: a full key (32 bytes, or 64 hex digits, taken as it is),
        a hex prefix of at least :data:`MIN_PREFIX` digits of one known user's key (``1a2b3c4d``, as ``users``
        and ``show`` label users), or the current name of one known user (compared casefolded; ``@name`` too).

        Known users: those :meth:`users` lists.  None, or more than one, is a
        :class:`cablestore.errors.UserNotFoundError` whose one line lists the
        candidates as ``name [1a2b3c4d]``.  The one resolution of every command and page that names a user.
        """
        if isinstance(who, (bytes, bytearray)) or (isinstance(who, str) and len(who) == 64 and set(who.lower()) <= _HEX):
            return as_hash(who)
        if not isinstance(who, str) or not who.strip():
            raise UserNotFoundError(f"a user is a public key, a hex prefix of {MIN_PREFIX}+ digits or a name, not {who!r}")
        everyone = self.users()
        names = {u.public_key: u.name for u in everyone}
        known = set(names)
        low = who.lower()
        by_prefix = {pk for pk in known if pk.hex().startswith(low)} if len(low) >= MIN_PREFIX and set(low) <= _HEX else set()
        wanted = who[1:] if who.startswith("@") and len(who) > 1 else who
        by_name = {pk for pk in known if names.get(pk) is not None and names[pk].casefold() == wanted.casefold()}
        found = by_prefix | by_name
        if len(found) == 1:
            return next(iter(found))
        if not found:
            hint = f" (a key's prefix has {MIN_PREFIX}+ hex digits)" if set(low) <= _HEX and len(low) < MIN_PREFIX else ""
            raise UserNotFoundError(f"no user {who!r} in this store{hint}; see `cablestore users STORE`")
        listed = sorted(found, key=lambda pk: (names[pk] or "", pk))
        shown = ", ".join(f"{names[pk] or '(no name)'} [{pk.hex()[:KEY_DIGITS]}]" for pk in listed[:_MAX_LISTED])
        more = f" and {len(listed) - _MAX_LISTED} more" if len(listed) > _MAX_LISTED else ""
        raise UserNotFoundError(f"{who!r} names {len(listed)} users: {shown}{more}; give more of a key")

    def users(self) -> list[UserSummary]:
        """Every known user (an author of a stored post, or named by a role, hide or block in effect), by key."""
        with self.db.snapshot() as snap:
            names, counts = _names(snap), _post_counts(snap)
            accepting = {pk: snap.get(user_view.property_key(pk, ACCEPT_ROLE)) for pk in names}
        roles: dict[bytes, dict[str, str]] = {}
        for context in self._moderation._contexts(roles_view):
            for pk, role in self._moderation.roles(context or None).items():
                roles.setdefault(pk, {})[context] = role
        hidden: dict[bytes, list[str]] = {}
        for context in self._moderation._contexts(actions_view):
            for pk in self._moderation.hidden_users(context or None):
                hidden.setdefault(pk, []).append(context)
        blocked = {pk: {"drop": v["drop"], "notify": v["notify"]} for pk, v in self._moderation.blocks().items()}
        known = sorted(set(names) | set(counts) | set(roles) | set(hidden) | set(blocked))
        for pk in known:
            names.setdefault(pk, None)
        shown = labels(names, known)
        return [
            UserSummary(
                pk, names[pk], shown[pk], roles.get(pk, {}), tuple(hidden.get(pk, ())), blocked.get(pk),
                ACCEPT_ROLE_VALUES.get((accepting.get(pk) or b"").decode("utf-8", "replace")), counts.get(pk, 0),
            )
            for pk in known
        ]


__all__ = ["MIN_PREFIX", "UserQueries", "UserSummary", "labels"]
