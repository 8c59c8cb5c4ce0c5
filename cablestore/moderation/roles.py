"""Who holds which role, from the local user's point of view, at any moment (moderation.md §4.2).

The input is a set of ``post/role`` posts and the ``accept-role`` values of
their recipients' ``post/info`` posts; the output does not depend on the order
they arrived in.  :class:`RoleHistory` answers "what was Z's role in context
C just before time T" for every T, which decides both which roles apply now
and whether a moderation action was issued with authority.

The rules, each from the spec (the numbers are moderation.md's sections):

* the local user is admin everywhere (§4.2.5 rule 1);
* a role post is *active* when it is its author's latest for that recipient
  and context (§4.2.2), *relevant* when in addition its recipient accepts
  roles — their latest ``post/info`` does not set ``accept-role=0``
  (§4.2.3-4); self-assignments are ignored (§4.4.3);
* a role post of an admin applies in a context while its author is admin
  there now *and* was admin there just before the post was issued
  (its timestamp strictly after the role that made them admin; §4.2.5,
  §4.4.3): revoking an admin revokes the roles they issued, except in the
  channels where they still hold admin; historic roles are not inherited;
  a mod's role posts never apply (§5.1.2.2);
* a channel's applicable roles are those issued for that channel and those
  for the whole cabal; the cabal's, those for the cabal only (§4.1.1);
* resolving a user in a context: the local user's applicable roles win
  (the most capable of them), then the most capable applied role of the
  admins, then normal user (§4.2.5 rules 2-4).

Applying roles can only add admins (the local user's roles are fixed, and
among the others the most capable wins), so each state is the least fixed
point reached from {local user}: one answer whatever the order of the posts.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from cablestore.wire.codec import ADMIN, MOD, USER

CABAL = ""  # the cabal context (moderation.md §4.1.1)
FOREVER = 1 << 64  # a time after every u64 timestamp: the present state
SEED = bytes(32)  # the "deciding hash" of a role that comes from the moderation seed (§4.7): no post decides it


@dataclass(frozen=True)
class RolePost:
    """A ``post/role``: ``author`` sets ``recipient`` to ``role`` in ``context`` (a canonical channel, or ``""``)."""

    hash: bytes
    author: bytes
    timestamp: int
    context: str
    recipient: bytes
    role: int

    @property
    def order(self) -> tuple[int, bytes]:
        """Newest is greatest: timestamp, ties broken by the higher hash (as everywhere in the store)."""
        return (self.timestamp, self.hash)


@dataclass(frozen=True)
class InfoPost:
    """A ``post/info`` as far as roles care: whose, when, and its ``accept-role`` (``None``: not set, so 1)."""

    hash: bytes
    author: bytes
    timestamp: int
    accept_role: bool | None


@dataclass
class RoleState:
    """Resolved roles just before one moment: ``roles[context][user] = (role, deciding post hash)``.

    Normal users are left out.  ``contexts`` are the cabal and every channel
    some relevant role names; a channel outside them has the cabal's roles.
    """

    roles: dict[str, dict[bytes, tuple[int, bytes]]] = field(default_factory=dict)
    relevant: list[RolePost] = field(default_factory=list)

    def role_of(self, user: bytes, context: str, local: bytes | None) -> int:
        """``user``'s role in ``context`` (ADMIN, MOD or USER)."""
        if local is not None and user == local:
            return ADMIN
        table = self.roles.get(context)
        if table is None:
            table = self.roles.get(CABAL, {})
        found = table.get(user)
        return USER if found is None else found[0]

    def has_authority(self, user: bytes, context: str, local: bytes | None) -> bool:
        """Admin or mod in ``context`` (the local user always)."""
        return self.role_of(user, context, local) in (ADMIN, MOD)


class RoleHistory:
    """The role state just before any moment, computed once per distinct moment and kept."""

    def __init__(self, local: bytes | None, roles: list[RolePost], infos: list[InfoPost], seed: dict | None = None, kept: frozenset = frozenset()):
        self.local = local
        self.seed = seed or {}  # user -> role the moderation seed gives them by default (§4.7)
        self.kept = kept  # posts of seeded users applied when the seed was cleared: they stay applied (§4.7.2)
        self.roles = sorted((r for r in roles if r.author != r.recipient), key=lambda r: r.order)
        self.infos: dict[bytes, list[InfoPost]] = {}
        for info in sorted(infos, key=lambda i: (i.timestamp, i.hash)):
            self.infos.setdefault(info.author, []).append(info)
        # The state only changes at a role's or an info's timestamp.
        self.moments = sorted({r.timestamp for r in self.roles} | {i.timestamp for i in infos})
        self._states: dict[int, RoleState] = {}

    def before(self, timestamp: int) -> RoleState:
        """The state made by the posts with a timestamp strictly before ``timestamp``."""
        n = bisect_left(self.moments, timestamp)  # moments < timestamp
        state = self._states.get(n)
        if state is None:
            cutoff = self.moments[n - 1] + 1 if n else 0
            state = self._states[n] = self._resolve(cutoff)
        return state

    def now(self) -> RoleState:
        """The present state: every post counts."""
        return self.before(FOREVER)

    def accepts(self, user: bytes, before: int) -> bool:
        """Whether ``user`` accepts roles, by their latest post/info before ``before`` (default: yes)."""
        seen = [i for i in self.infos.get(user, ()) if i.timestamp < before]
        return not seen or seen[-1].accept_role is not False

    def relevant(self, before: int = FOREVER) -> list[RolePost]:
        """The relevant roles (§4.2.3) among the posts before ``before``: active, and their recipient accepts roles.

        Relevance reads nothing but the role posts and the recipients'
        post/infos: not whether the author holds authority, nor blocks.
        """
        active: dict[tuple, RolePost] = {}
        for r in self.roles:
            if r.timestamp >= before:
                break
            active[(r.author, r.recipient, r.context)] = r  # sorted: the newest wins
        return [r for r in active.values() if self.accepts(r.recipient, before)]

    def _resolve(self, before: int) -> RoleState:
        local = self.local
        relevant = self.relevant(before)
        state = RoleState(relevant=relevant)
        if local is None:
            return state  # no one's roles apply without a local user
        contexts = {CABAL} | {r.context for r in relevant}
        for context in sorted(contexts):
            applicable = [r for r in relevant if r.context in (context, CABAL) and r.recipient != local]
            state.roles[context] = self._fixed_point(applicable, context)
        return state

    def _fixed_point(self, applicable: list[RolePost], context: str) -> dict[bytes, tuple[int, bytes]]:
        local = self.local
        by_recipient: dict[bytes, list[RolePost]] = {u: [] for u in self.seed if u != local}
        for r in applicable:
            by_recipient.setdefault(r.recipient, []).append(r)
        admins = {local}
        while True:
            table: dict[bytes, tuple[int, bytes]] = {}
            for user, posts in by_recipient.items():
                decided = self._decide(posts, admins, context)
                if decided is None and user in self.seed:
                    decided = (self.seed[user], SEED)  # the seed's default, until a role decides otherwise
                if decided is not None and decided[0] != USER:
                    table[user] = decided
            grown = {local} | {u for u, (role, _) in table.items() if role == ADMIN}
            if grown == admins:
                return table
            admins = grown

    def _decide(self, posts: list[RolePost], admins: set, context: str) -> tuple[int, bytes] | None:
        """The role of one recipient given the current admins: ``(role, deciding hash)``."""
        local = self.local
        mine = [r for r in posts if r.author == local]
        if mine:
            best = min(mine, key=lambda r: (r.role, -r.timestamp, r.hash))
            return best.role, best.hash
        applied = [r for r in posts if r.hash in self.kept or (r.author in admins and self._was_admin(r.author, context, r.timestamp))]
        if not applied:
            return None
        # The most capable; among equals the earliest, so "admin since" is the first grant.
        best = min(applied, key=lambda r: (r.role, r.timestamp, r.hash))
        return best.role, best.hash

    def _was_admin(self, user: bytes, context: str, timestamp: int) -> bool:
        if user == self.local or self.seed.get(user) == ADMIN:  # a seeded admin's posts count whenever authored (§4.7.2)
            return True
        return self.before(timestamp).role_of(user, context, self.local) == ADMIN

    def had_authority(self, user: bytes, context: str, timestamp: int) -> bool:
        """Whether ``user`` could moderate in ``context`` when they posted at ``timestamp``: by their role then, or a seeded role."""
        if self.seed.get(user) in (ADMIN, MOD):
            return True
        return self.before(timestamp).has_authority(user, context, self.local)
