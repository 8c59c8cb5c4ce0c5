"""The derived views, one module each, all of one shape.

Every module lays out its keys with module-level functions (``PREFIX``, from
:mod:`cablestore.keyspace.keys`, and the key builders its queries use) and
ends with a subclass of :class:`views.base.View` naming the functions that
answer the view contract, and ``VIEW``, its one instance.  ``View`` states
the whole contract with a default for each part (as diskcache's ``Disk``):

``entries(ip)``, ``groups(ip)``
    The entries one indexed post contributes, and the "latest" groups it
    competes in (default: none).
``candidates(group)``, ``rank(group, ip)``, ``latest(group, winner)``
    Where a group's candidates are (a prefix, or a few: the latest is the
    greatest of one reverse seek each), how one ranks (default: the mono
    timestamp), and the entries its winner gives.
``winner_key(group)``, ``register_rank(group, value)``
    A register: the key whose value (written by ``latest``) names the
    group's winner, read with one point read instead of seeking the
    candidates; those are sought (one bounded reverse seek per prefix, when
    ``candidates`` names several) only when the winner is removed (default:
    no register).
``latest_needs_winner(group, rank)``
    False when ``latest`` is empty for any winner of that rank or higher
    (default: always True).
``latest_prefix(group)``, ``latest_keys(group)``, ``latest_keys_from_post(...)``
    Which keys ``latest`` wrote before, so the store removes the stale ones:
    named without reading, or the stored keys under ``latest_prefix``, or
    (``LATEST_FROM_POST``) named by the stored post the group names.
``OWN_CANDIDATE``
    The post a group names is itself its lowest-ranked candidate while stored
    (``links``: a post nothing links to is a head).
``bulk_latest(post_keys, linker_keys, get, skip)`` (``BULK_LATEST``)
    Every group's ``latest`` at once, for a bulk reindex.
``candidates_prefix()``, ``RESOLVED_PREFIXES``, ``resolved(state)``
    The views resolved from the whole set of moderation posts (``roles``,
    ``actions``, ``blocks``).

Views are pure: they receive data and return keys and values, never read
the store.  The live store and the rebuild (local and Spark) call these
and nothing else to know what a view holds.
"""

from cablestore.compiled import native as _native
from cablestore.keyspace.keys import escape

from . import actions, author, blocks, channel, chat, links, recon, roles, state, user
from .base import View

VIEWS = tuple(m.VIEW for m in (chat, state, author, user, channel, links, roles, actions, blocks, recon))
# Views whose resolved entries are computed from the whole set of moderation posts
# (``resolved(state)``, under ``RESOLVED_PREFIXES``), besides their per-post entries.
RESOLVED = tuple(v for v in VIEWS if v.RESOLVED_PREFIXES)
BY_NAME = {v.NAME: v for v in VIEWS}


# Looked up once: these run for every post of every ingest, reindex and rebuild.
_ENTRIES = tuple(v.entries for v in VIEWS)
_GROUPS = tuple((v, v.groups) for v in VIEWS)
RANKERS = {v: None if type(v).rank is View.rank else v.rank for v in VIEWS}
"""Each view's own ``rank``, or None where it is the default (the mono timestamp, read without a call)."""


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
#: The sub-keys the compiled twins write, taken from the views that own them (the compiled source spells none).
SUBKEYS = {
    "state_member": state.MEMBER_ROWS, "state_topic": state.TOPIC_ROWS, "user_posts": user.POST_ROWS,
    "user_latest_hash": user.LATEST_HASH, "linker": links.LINKER, "channel_member": channel.MEMBER_GROUP, "channel_topic": channel.TOPIC_GROUP,
}
if _native is not None:  # the compiled twins (cablestore.compiled): the same entries, in the same order
    _native.bind_views(entries_py, groups_py, escape, chat.VIEW, state.VIEW, author.VIEW, user.VIEW, channel.VIEW, links.VIEW, SUBKEYS)
    entries, groups = _native.entries, _native.groups


def ranked_groups(ip, views=VIEWS):
    """``(view, group, rank)`` for every group of ``ip`` in ``views`` (see :func:`rank`)."""
    if _native is not None:  # the compiled groups, filtered and ranked: the same triples in the same order
        rankers = RANKERS
        return [(view, g, ip.mono if rankers[view] is None else rankers[view](g, ip)) for view, g in groups(ip) if view in views]
    plan = _PLANS.get(views)
    if plan is None:
        plan = _PLANS[views] = tuple((v, v.groups, RANKERS[v]) for v in VIEWS if v in views)
    out = []
    for view, view_groups, ranker in plan:
        for g in view_groups(ip):
            out.append((view, g, ip.mono if ranker is None else ranker(g, ip)))
    return out


_PLANS: dict = {}  # views (a tuple) -> what ranked_groups calls for them


def rank(view, group: bytes, ip) -> bytes:
    """How ``ip`` ranks among the candidates of ``group``: the greatest is the latest."""
    ranker = RANKERS[view]
    return ip.mono if ranker is None else ranker(group, ip)


def resolved_entries(state) -> list:
    """Every resolved entry of a :class:`cablestore.moderation.State`, sorted by key."""
    out = []
    for view in RESOLVED:
        out += view.resolved(state)
    return sorted(out)
