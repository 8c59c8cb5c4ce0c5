"""The derived views, one module each, all of the same shape.

Every module defines:

``NAME``, ``PREFIX``
    The view's name and the key prefix all its entries live under.
``entries(ip) -> list[(key, value)]``
    The entries one indexed post contributes (pure function of the post and,
    for a ``post/delete``, the tombstones it made).
``groups(ip) -> list[bytes]``
    The "latest" groups the post competes in (empty for plain views).
Views whose ``groups`` can be non-empty (``user``, ``channel``, ``links``)
also define:

``candidates(group) -> bytes``
    The key prefix under which every post of the group has one entry ending
    in its mono timestamp, so the latest is one reverse seek away.
``latest(group, winner) -> list[(key, value)]``
    The entries of a group given its latest post (``None``: no post left).
``latest_prefix(group) -> bytes``
    The prefix every key ``latest`` can write for the group starts with
    (or ``latest_keys(group, txn)``: the keys it wrote that the DB holds,
    found with ``txn.scan(prefix)`` or ``txn.db``, or known without reading, when no one prefix holds them).
``rank(group, ip) -> bytes`` (optional)
    The suffix of the post's candidate key after ``candidates(group)``; the
    highest rank is the latest.  Default: the mono timestamp.
``latest_needs_winner(group, rank) -> bool`` (optional)
    False when ``latest(group, winner)`` is empty for every winner of that
    rank or a higher one: a bulk recomputation need not load the winning
    post, and an ingest whose new candidate has such a rank need not look
    for a stored one.  Default: always True.
``bulk_latest(reverse_keys, get) -> iterable of (key, value)`` (optional)
    Every group's ``latest`` entries at once, from the keys of the ``!rev!``
    range (in key order; ``get(key)`` reads a value) once every post's
    entries are written: for a view with a group per post (``links``), so a
    bulk reindex holds no candidate per group.  It must equal calling
    ``latest`` on each group's winner.

Views whose state is resolved from a whole set of posts (``roles``,
``actions``, ``blocks``: the moderation state) also define:

``candidates_prefix()``
    Where their posts' per-post entries are, so the store can find them all.
``RESOLVED_PREFIXES``, ``resolved(state) -> list[(key, value)]``
    The entries a :class:`cablestore.moderation.State` gives, and the prefixes
    they live under (replaced as a whole when the state changes).

The live store and the rebuild (local and Spark) call these functions and
nothing else to know what a view holds.
"""

import msgpack

from cablestore.compiled import native as _native
from cablestore.keyspace import reverse
from cablestore.keyspace.keys import escape

from . import actions, author, blocks, channel, chat, links, roles, state, user

VIEWS = (chat, state, author, user, channel, links, roles, actions, blocks)
# Views whose resolved entries are computed from the whole set of moderation posts
# (``resolved(state)``, under ``RESOLVED_PREFIXES``), besides their per-post entries.
RESOLVED = (roles, actions, blocks)
BY_NAME = {v.NAME: v for v in VIEWS}


# Looked up once: these run for every post of every ingest, reindex and rebuild.
_ENTRIES = tuple(v.entries for v in VIEWS)
_GROUPS = tuple((v, v.groups) for v in VIEWS)
_RANKERS = {v: getattr(v, "rank", None) for v in VIEWS}


def entries(ip):
    """All derived per-post entries of one indexed post, in view order."""
    out = []
    for view_entries in _ENTRIES:
        out += view_entries(ip)
    return out


def groups(ip):
    """``(view, group)`` pairs whose latest entries may change with this post."""
    return [(view, g) for view, view_groups in _GROUPS for g in view_groups(ip)]


entries_py, groups_py = entries, groups
if _native is not None:  # the compiled twins (cablestore.compiled): the same entries, in the same order
    _native.bind_views(entries_py, groups_py, escape, chat, state, author, user, channel, links)
    entries, groups = _native.entries, _native.groups


def ranked_groups(ip, views=VIEWS):
    """``(view, group, rank)`` for every group of ``ip`` in ``views`` (see :func:`rank`)."""
    if _native is not None:  # the compiled groups, filtered and ranked: the same triples in the same order
        rankers = _RANKERS
        return [(view, g, ip.mono if rankers[view] is None else rankers[view](g, ip)) for view, g in groups(ip) if view in views]
    plan = _PLANS.get(views)
    if plan is None:
        plan = _PLANS[views] = tuple((v, v.groups, _RANKERS[v]) for v in VIEWS if v in views)
    out = []
    for view, view_groups, ranker in plan:
        for g in view_groups(ip):
            out.append((view, g, ip.mono if ranker is None else ranker(g, ip)))
    return out


_PLANS: dict = {}  # views (a tuple) -> what ranked_groups calls for them


def rank(view, group: bytes, ip) -> bytes:
    """How ``ip`` ranks among the candidates of ``group``: the greatest is the latest."""
    ranker = _RANKERS[view] if view in _RANKERS else getattr(view, "rank", None)
    return ip.mono if ranker is None else ranker(group, ip)


def needs_winner(view, group: bytes, rank: bytes) -> bool:
    """False when ``view.latest(group, winner)`` is empty for any winner of rank ``rank`` or higher."""
    decide = getattr(view, "latest_needs_winner", None)
    return True if decide is None else decide(group, rank)


def latest_keys(view, group: bytes, txn) -> list[bytes]:
    """The keys ``view.latest`` wrote for ``group`` that the DB holds (``txn``: a ``cablestore.store.txn.Txn``)."""
    locate = getattr(view, "latest_keys", None)
    if locate is not None:
        return locate(group, txn)
    return [key for key, _ in txn.scan(view.latest_prefix(group))]


def reverse_keys(post_hash: bytes, value: bytes) -> list[bytes]:
    """Every per-post view key of the post whose reverse entry (``!rev!<hash>``) is ``value``, but its linker entries."""
    return [k for k, _ in entries(reverse.stand_in(post_hash, value))]


def reverse_keys_or_none(post_hash: bytes, value: bytes | None) -> list[bytes] | None:
    """:func:`reverse_keys`, or None when the entry is missing or damaged (the caller falls back on the post)."""
    if value is None:
        return None
    try:
        return reverse_keys(post_hash, value)
    except (ValueError, TypeError, AttributeError, IndexError, msgpack.UnpackException):
        return None


def resolved_entries(state) -> list:
    """Every resolved entry of a :class:`cablestore.moderation.State`, sorted by key."""
    out = []
    for view in RESOLVED:
        out += view.resolved(state)
    return sorted(out)
