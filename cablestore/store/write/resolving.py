"""Keeping the resolved moderation views current, inside the write transaction that changed them.

When a transaction adds or removes a post the moderation state is computed
from (types 6-9, and post/info for ``accept-role``), :func:`refresh` reads
every moderation post the store will hold once it commits, resolves the state
with :func:`cablestore.moderation.resolve`, and writes the difference to the
resolved entries of ``views.roles``, ``views.actions`` and ``views.blocks``
in the same WriteBatch: a crash leaves the old state or the new one, never a
mix, and the result depends only on the set of posts.

Moderation posts are few next to chat, so the state is recomputed whole
rather than patched: simple, and exactly what the rebuild computes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from cablestore import views
from cablestore.errors import CorruptRecordError
from cablestore.keyspace import facts
from cablestore.keyspace.keys import DELETED, POSTS, SEED_KEPT, SEED_KEY
from cablestore.keyspace.records import Tombstone
from cablestore.moderation import RELEVANT_TYPES, Seed, parse_seed, resolve
from cablestore.views import roles, user
from cablestore.wire.codec import MODERATION_TYPES, decode_post

if TYPE_CHECKING:
    from cablestore.store.write.batch import IndexState


def needed(types: set[int]) -> bool:
    """Whether a transaction that touched posts of these types can change the moderation state."""
    return not RELEVANT_TYPES.isdisjoint(types)


def worth_resolving(batch: IndexState) -> bool:
    """False when the only relevant posts touched are post/infos of users no post/role names (the common case)."""
    if not MODERATION_TYPES.isdisjoint(batch.types):
        return True
    # No post/role was added or removed, so this batch wrote nothing under the
    # roles' candidates: the DB's rows are the ones it will hold (a scan, not
    # an overlay of every write, which sorts them all: ~1 ms a batch of 1,000).
    recipients = {value for _, value in batch.scan(roles.candidates_prefix())}
    return not recipients.isdisjoint(batch.info_authors)


def moderation_posts(current: Callable[[bytes], list], read: Callable[[bytes], bytes | None]) -> list:
    """``(hash, post)`` of every moderation post and every post/info of a role recipient.

    ``current(prefix)`` lists ``(key, value)`` under a prefix as the store
    holds them (or will, once a transaction commits); ``read(hash)`` a post's bytes.
    """
    posts = []
    for view in views.RESOLVED:
        for key, _ in current(view.candidates_prefix()):
            blob = read(key[-32:])
            if blob is not None:
                posts.append((key[-32:], decode_post(blob)))
    recipients = {p.recipients[0] for _, p in posts if p.post_type == 6}
    for pk in sorted(recipients):
        for key, _ in current(user.posts_prefix(pk)):
            blob = read(key[-32:])
            if blob is not None:
                posts.append((key[-32:], decode_post(blob)))
    return posts + held_facts(current)


def held_facts(current: Callable[[bytes], list]) -> list:
    """``(hash, fact)`` of every fact (``cablestore.keyspace.facts``) whose post is not held and not deleted by its author.

    A damaged fact is left out here (the state is computed without it) and
    reported by ``check``.
    """
    out = []
    for key, value in current(facts.FACTS):
        h = key[len(facts.FACTS) :]
        if current(POSTS + h):
            continue  # the post itself is held (offered again since): it speaks for itself
        try:
            fact = facts.unpack(h, value)
        except CorruptRecordError:
            continue
        if _deleted_by(current, h, fact.public_key):
            continue  # deleted by its author: gone for good, as the post would be
        out.append((h, fact))
    return out


def _deleted_by(current, h: bytes, author: bytes) -> bool:
    for key, value in current(DELETED + h):
        try:
            if Tombstone.unpack(h, key[-32:], value).deleter == author:
                return True
        except CorruptRecordError:
            continue  # a damaged tombstone decides nothing (check reports it)
    return False


def refresh(batch: IndexState, local: bytes | None) -> set[bytes]:
    """Rewrite the resolved entries for the state ``batch`` leaves; return the keys written (new or changed)."""
    state = resolve(local, moderation_posts(batch.current, lambda h: batch.get(POSTS + h)), stored_seed(batch.get))
    fresh = dict(views.resolved_entries(state))
    old = {}
    for view in views.RESOLVED:
        for prefix in view.RESOLVED_PREFIXES:
            old.update(batch.current(prefix))
    for key in old.keys() - fresh.keys():
        batch.delete(key)
    changed = set()
    for key, value in fresh.items():
        if old.get(key) != value:
            batch.put(key, value)
            changed.add(key)
    return changed


def stored_seed(get: Callable[[bytes], bytes | None]) -> Seed:
    """The store's moderation seed (``!local!seed``) and the seeded posts kept applied (``!local!seeded``)."""
    data, kept = get(SEED_KEY), get(SEED_KEPT) or b""
    return Seed(parse_seed(data) if data else {}, frozenset(kept[i : i + 32] for i in range(0, len(kept) - 31, 32)))
