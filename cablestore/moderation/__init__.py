"""The moderation state as a pure function of the posts a store holds (moderation.md 1.0-draft8).

:func:`resolve` takes the local user and every stored ``post/role``,
``post/moderation``, ``post/block``, ``post/unblock`` and ``post/info``, and
returns a :class:`State`: the roles in effect (:mod:`cablestore.moderation.roles`)
and the actions and blocks in effect (:mod:`cablestore.moderation.actions`).
The same posts give the same state whatever order they arrived in; the views
(``cablestore.views.roles``, ``actions``, ``blocks``) store it, and the
rebuild recomputes it with this same function.  ``docs/moderation.md`` walks
through every rule and each choice where the spec is silent.

Blocks (§4.6) discard the blocked user's moderation posts: a user whose
block stands is resolved as if they had authored no post/role,
post/moderation, post/block or post/unblock, and holds no role.  What is
*relevant* (§4.2.3, §4.4.2: what a moderation state request is answered
with) is another question, answered without blocks: a role naming a blocked
user, and a held role or action a blocked user wrote, stay relevant.  Whose block
stands is itself decided without the blocked user's posts (a block that
holds only through authority its target gave cannot cut that authority
off), as the least fixed point from the local user (:func:`standing_blocks`).
``posts`` may include *facts* (``cablestore.keyspace.facts``): the fields of
a moderation post or post/info a block removed from the store, so the state
stays a function of the set of posts offered; they decide the state like
the posts they stand for, and are never listed as relevant posts (the store
does not hold them to send).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cablestore.keyspace.keys import canonical_channel
from cablestore.moderation.actions import BLOCKS, KIND_OF_ACTION, Action, Effects, relevant_actions
from cablestore.moderation.actions import resolve as resolve_actions
from cablestore.moderation.roles import CABAL, SEED, InfoPost, RoleHistory, RolePost, RoleState
from cablestore.moderation.seed import Seed, format_seed, parse_seed
from cablestore.wire.codec import BLOCK, DROP_CHANNEL, INFO, MODERATION, MODERATION_TYPES, ROLE, UNBLOCK, UNDROP_CHANNEL, Post

RELEVANT_TYPES = MODERATION_TYPES | {INFO}  # what the state is computed from

__all__ = ["State", "resolve", "context_of", "accepts_roles", "standing_blocks", "RELEVANT_TYPES", "CABAL", "SEED", "Seed", "parse_seed", "format_seed", "seeded_applied"]


@dataclass
class State:
    """The resolved moderation state: ``roles`` (present), ``history`` (roles at any moment) and ``effects``."""

    local: bytes | None
    roles: RoleState
    history: RoleHistory
    effects: Effects


def context_of(channel: str) -> str:
    """A channel context as stored: ``""`` for the cabal, else the canonical channel name."""
    return CABAL if channel == "" else canonical_channel(channel)


def resolve(local: bytes | None, posts: Iterable[tuple[bytes, Post]], seed: Seed | None = None) -> State:
    """The moderation state given the local user, ``(hash, post)`` pairs (other post types are ignored) and a moderation seed (§4.7)."""
    roles, infos, actions, facts = [], [], [], set()
    for h, p in posts:
        t = p.post_type
        if not p.signature:
            facts.add(h)  # a fact: the post it stands for is not held
        if t == ROLE:
            roles.append(RolePost(h, p.public_key, p.timestamp, context_of(p.channel), p.recipients[0], p.role))
        elif t == INFO:
            infos.append(InfoPost(h, p.public_key, p.timestamp, accepts_roles(p)))
        elif t == MODERATION:
            context = context_of(p.channel)
            kind = KIND_OF_ACTION[p.action]
            targets = [context.encode()] if p.action in (DROP_CHANNEL, UNDROP_CHANNEL) else p.recipients
            actions += [Action(h, p.public_key, p.timestamp, context, r, kind, p.action) for r in targets]
        elif t == BLOCK:
            actions += [Action(h, p.public_key, p.timestamp, CABAL, r, BLOCKS, "block", (p.drop, p.notify)) for r in p.recipients]
        elif t == UNBLOCK:
            actions += [Action(h, p.public_key, p.timestamp, CABAL, r, BLOCKS, "unblock", (p.undrop,)) for r in p.recipients]
    seed = seed or Seed()
    blocked = standing_blocks(local, roles, infos, actions, seed)
    history, effects = _without(local, roles, infos, actions, blocked, seed)
    now = history.now()
    if blocked:
        # A blocked user's roles end with the block (and come back with an
        # unblock): no authority, and no context of their own.
        contexts = {CABAL} | {r.context for r in now.relevant if r.recipient not in blocked}
        roles_now = {c: {u: v for u, v in table.items() if u not in blocked} for c, table in now.roles.items() if c in contexts}
        # Relevance (§4.2.3, §4.4.2) reads neither authority nor blocks: the
        # roles naming a blocked user, and the held roles and actions a blocked
        # user wrote, stay relevant, so a moderation state answer lists them.
        everyone = RoleHistory(local, roles, infos, seed.roles, seed.kept)
        now = RoleState(roles_now, everyone.relevant())
        effects.relevant = relevant_actions(actions)
    if facts:
        now = RoleState(now.roles, [r for r in now.relevant if r.hash not in facts])
    effects.blocked = {user: a for user, a in effects.blocked.items() if user in blocked}
    effects.relevant = [a for a in effects.relevant if a.hash not in facts]
    return State(local, now, history, effects)


def accepts_roles(post: Post) -> bool | None:
    """A post/info's ``accept-role`` (wire.md §6.2.4: a one-byte varint, 0 or 1): None when it does not set it."""
    value = post.accept_role
    return None if value is None else value == 1


def _without(local, roles, infos, actions, excluded: frozenset, seed: Seed) -> tuple[RoleHistory, Effects]:
    """The roles and effects resolved as if the users in ``excluded`` had authored no moderation post."""
    history = RoleHistory(local, [r for r in roles if r.author not in excluded], infos, seed.roles, seed.kept)
    return history, resolve_actions(local, [a for a in actions if a.author not in excluded], history)


def standing_blocks(local: bytes | None, roles: list, infos: list, actions: list, seed: Seed | None = None) -> frozenset:
    """The users whose block stands: the least fixed point from the local user.

    A user ``u`` is blocked when a block on them is in effect in the state
    resolved without the moderation posts of the users already blocked and
    of ``u`` themselves (so no block stands on authority ``u`` gave).  Rounds
    start from nobody blocked and recompute the set until it repeats.  Blocks
    that undo each other (each stands only while the other does not) never
    settle: the users blocked in every round of that cycle are blocked, and
    the set then only shrinks until every member is blocked in the state
    without them.  Each round depends only on the set of posts, so the answer
    does too.
    """
    targets = sorted({a.target for a in actions if a.kind == BLOCKS and a.action == "block" and a.target != local})
    if local is None or not targets:
        return frozenset()
    seed = seed or Seed()
    authors = {r.author for r in roles} | {a.author for a in actions}
    blocked: frozenset = frozenset()
    seen: list[frozenset] = [blocked]
    for _ in range(2 * len(targets) + 2):
        base = _without(local, roles, infos, actions, blocked, seed)[1].blocked
        found = set()
        for t in targets:
            if t in authors and t not in blocked:  # their own posts count in ``base``: resolve without them
                if t in _without(local, roles, infos, actions, blocked | {t}, seed)[1].blocked:
                    found.add(t)
            elif t in base:
                found.add(t)
        nxt = frozenset(found)
        if nxt == blocked:
            return blocked
        if nxt in seen:  # a cycle: keep who is blocked in every round of it
            cycle = seen[seen.index(nxt):]
            blocked = frozenset.intersection(*cycle)
            break
        seen.append(nxt)
        blocked = nxt
    while True:  # only shrinks: every member blocked in the state without the set
        kept = blocked & frozenset(_without(local, roles, infos, actions, blocked, seed)[1].blocked)
        if kept == blocked:
            return blocked
        blocked = kept


def seeded_applied(state: State, seed: Seed) -> frozenset:
    """The hashes of the posts of seeded users that are applied in ``state``: what stays applied when the seed is cleared (§4.7.2)."""
    users = set(seed.roles)
    out = {h for table in state.roles.roles.values() for _, (role, h) in table.items() if h != SEED}
    out = {r.hash for r in state.history.roles if r.hash in out and r.author in users}
    fx = state.effects
    actions = [*fx.hidden_posts.values(), *fx.dropped_posts.values(), *fx.dropped_channels.values(), *fx.blocked.values(), *fx.unblocked.values()]
    actions += [a for users_ in fx.hidden_users.values() for a in users_.values()]
    return frozenset(out | {a.hash for a in actions if a.author in users}) | seed.kept
