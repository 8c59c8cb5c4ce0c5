"""The moderation state as a pure function of the posts a store holds (moderation.md 1.0-draft8).

:func:`resolve` takes the local user and every stored ``post/role``,
``post/moderation``, ``post/block``, ``post/unblock`` and ``post/info``, and
returns a :class:`State`: the roles in effect (:mod:`cablestore.moderation.roles`)
and the actions and blocks in effect (:mod:`cablestore.moderation.actions`).
The same posts give the same state whatever order they arrived in; the views
(``cablestore.views.roles``, ``actions``, ``blocks``) store it, and the
rebuild recomputes it with this same function.  ``docs/moderation.md`` walks
through every rule and each choice where the spec is silent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cablestore.keyspace.keys import canonical_channel
from cablestore.moderation.actions import BLOCKS, KIND_OF_ACTION, Action, Effects
from cablestore.moderation.actions import resolve as resolve_actions
from cablestore.moderation.roles import CABAL, InfoPost, RoleHistory, RolePost, RoleState
from cablestore.wire.codec import BLOCK, DROP_CHANNEL, INFO, MODERATION, MODERATION_TYPES, ROLE, UNBLOCK, UNDROP_CHANNEL, Post

RELEVANT_TYPES = MODERATION_TYPES | {INFO}  # what the state is computed from

__all__ = ["State", "resolve", "context_of", "RELEVANT_TYPES", "CABAL"]


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


def resolve(local: bytes | None, posts: Iterable[tuple[bytes, Post]]) -> State:
    """The moderation state given the local user and ``(hash, post)`` pairs (other post types are ignored)."""
    roles, infos, actions = [], [], []
    for h, p in posts:
        t = p.post_type
        if t == ROLE:
            roles.append(RolePost(h, p.public_key, p.timestamp, context_of(p.channel), p.recipients[0], p.role))
        elif t == INFO:
            value = p.info_value("accept-role")
            infos.append(InfoPost(h, p.public_key, p.timestamp, None if value is None else value != "0"))
        elif t == MODERATION:
            context = context_of(p.channel)
            kind = KIND_OF_ACTION[p.action]
            targets = [context.encode()] if p.action in (DROP_CHANNEL, UNDROP_CHANNEL) else p.recipients
            actions += [Action(h, p.public_key, p.timestamp, context, r, kind, p.action) for r in targets]
        elif t == BLOCK:
            actions += [Action(h, p.public_key, p.timestamp, CABAL, r, BLOCKS, "block", (p.drop, p.notify)) for r in p.recipients]
        elif t == UNBLOCK:
            actions += [Action(h, p.public_key, p.timestamp, CABAL, r, BLOCKS, "unblock", (p.undrop,)) for r in p.recipients]
    history = RoleHistory(local, roles, infos)
    return State(local, history.now(), history, resolve_actions(local, actions, history))
