"""Which moderation actions and blocks take effect, from the local user's point of view (moderation.md §4.4, §4.6).

An action post names recipients (users, posts, or a channel) and an action;
for each recipient it is one *action*: ``(author, target, context, kind)``
where the kind pairs an action with the one undoing it (hide/unhide user,
hide/unhide post, drop/undrop post, drop/undrop channel, block/unblock).

* *relevant*: the newest action of its author for that target, context and
  kind (§4.4.2) — an unhide makes the hide before it obsolete; a post/delete
  of an action by its author removes it from the set, so the one before it
  counts again (§4.4.4: "if an author deletes their moderation action, its
  effects MUST be undone");
* *applicable*: relevant, and its author is the local user or held
  authority (admin or mod) in its context just before it was issued (§4.4.3);
  it stays applicable after a later revocation (§4.4.4).  An action on a
  user who now holds authority applies only if the local user issued it
  (§4.4.5); a block's context is the cabal;
* *in effect*: among the applicable actions on one target, the local user's
  newest wins, otherwise the newest (§4.4.5); equal timestamps go to the
  higher hash.  For users, a channel is decided by the actions for that
  channel and those for the cabal together, so a cabal-wide hide with a later
  unhide in one channel leaves the user hidden everywhere but there (§4.4).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cablestore.moderation.roles import CABAL, RoleHistory
from cablestore.wire.codec import DROP_CHANNEL, DROP_POST, HIDE_POST, HIDE_USER

USERS, POSTS, DROPS, CHANNELS, BLOCKS = "users", "posts", "drops", "channels", "blocks"
KIND_OF_ACTION = {0: USERS, 1: USERS, 2: POSTS, 3: POSTS, 4: DROPS, 5: DROPS, 6: CHANNELS, 7: CHANNELS}
DOING = {HIDE_USER, HIDE_POST, DROP_POST, DROP_CHANNEL}  # the even actions; the odd ones undo them


@dataclass(frozen=True)
class Action:
    """One recipient of an action post (``action`` 0-7), or of a block (``action`` "block") or unblock ("unblock")."""

    hash: bytes
    author: bytes
    timestamp: int
    context: str
    target: bytes  # a public key, a post hash, or a channel's canonical name (UTF-8)
    kind: str
    action: int | str
    flags: tuple[int, ...] = ()  # (drop, notify) of a block, (undrop,) of an unblock

    @property
    def order(self) -> tuple[int, bytes]:
        """Newest is greatest: timestamp, ties broken by the higher hash."""
        return (self.timestamp, self.hash)

    @property
    def does(self) -> bool:
        """True for hide, drop and block; False for the actions undoing them."""
        return self.action in DOING or self.action == "block"


@dataclass
class Effects:
    """What takes effect.  Every value is the Action that decided it (for its hash, author and reason)."""

    hidden_users: dict[str, dict[bytes, Action]] = field(default_factory=dict)  # context -> user -> hide (a channel not here: the cabal's)
    hidden_posts: dict[bytes, Action] = field(default_factory=dict)
    dropped_posts: dict[bytes, Action] = field(default_factory=dict)
    dropped_channels: dict[str, Action] = field(default_factory=dict)
    blocked: dict[bytes, Action] = field(default_factory=dict)  # user -> the block in effect
    unblocked: dict[bytes, Action] = field(default_factory=dict)  # user -> the unblock in effect
    blocks_of_local: dict[bytes, Action] = field(default_factory=dict)  # blocker -> their notified block of the local user
    kept_out: dict[bytes, Action] = field(default_factory=dict)  # user -> an unblock (undrop=0) after a dropping block
    relevant: list[Action] = field(default_factory=list)  # every relevant action, applicable or not


def resolve(local: bytes | None, actions: list[Action], history: RoleHistory) -> Effects:
    """The effects of ``actions`` (every recipient of every stored action, block and unblock post)."""
    effects = Effects(relevant=relevant_actions(actions))
    now = history.now()
    for a in effects.relevant:
        if a.kind == BLOCKS and a.action == "block" and local is not None and a.target == local and a.flags[1] == 1:
            effects.blocks_of_local[a.author] = a
    applicable = [a for a in effects.relevant if _applicable(a, local, history, now)]
    by_target: dict[tuple, list[Action]] = {}
    for a in applicable:
        by_target.setdefault((a.kind, a.target), []).append(a)
    user_contexts = {CABAL} | {a.context for a in applicable if a.kind == USERS}
    # Every context decided gets a table, empty or not: a channel without one has the cabal's.
    effects.hidden_users = {context: {} for context in sorted(user_contexts)}
    for (kind, target), group in by_target.items():
        if kind == USERS:
            for context in user_contexts:
                winner = _winner([a for a in group if a.context in (context, CABAL)], local)
                if winner is not None and winner.does:
                    effects.hidden_users[context][target] = winner
            continue
        winner = _winner(group, local)
        if winner is None:
            continue
        if kind == BLOCKS:
            (effects.blocked if winner.does else effects.unblocked)[target] = winner
            if not winner.does and winner.flags[0] == 0 and _dropped_before(actions, winner, local, history, now):
                effects.kept_out[target] = winner  # "undrop = 0: keep the user's old posts as dropped" (§5.1.5)
        elif winner.does:
            table = {POSTS: effects.hidden_posts, DROPS: effects.dropped_posts, CHANNELS: effects.dropped_channels}[kind]
            table[target.decode() if kind == CHANNELS else target] = winner
    return effects


def relevant_actions(actions: list[Action]) -> list[Action]:
    """The relevant actions (§4.4.2), oldest first: the newest of each author for one target, context and kind.

    Relevance reads only the actions themselves: not whether their author
    holds authority, nor blocks.
    """
    newest: dict[tuple, Action] = {}
    for a in sorted(actions, key=lambda a: a.order):
        newest[(a.author, a.target, a.context, a.kind)] = a
    return sorted(newest.values(), key=lambda a: a.order)


def _dropped_before(actions: list[Action], unblock: Action, local, history, now) -> bool:
    """Whether an applicable block with ``drop = 1`` on the same user came before ``unblock``."""
    return any(
        a.kind == BLOCKS and a.action == "block" and a.flags[0] == 1 and a.target == unblock.target
        and a.order < unblock.order and _applicable(a, local, history, now)
        for a in actions
    )


def _applicable(a: Action, local: bytes | None, history: RoleHistory, now) -> bool:
    if local is None:
        return False
    if a.author == local:
        return True
    context = CABAL if a.kind == BLOCKS else a.context
    if a.hash not in history.kept and not history.had_authority(a.author, context, a.timestamp):
        return False
    if a.kind in (USERS, BLOCKS) and now.has_authority(a.target, context, local):
        return False  # an action on someone holding authority: shown, not applied (§4.4.5)
    return True


def _winner(group: list[Action], local: bytes | None) -> Action | None:
    if not group:
        return None
    mine = [a for a in group if a.author == local]
    return max(mine or group, key=lambda a: a.order)

