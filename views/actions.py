"""``!actions``: every post/moderation, and the actions in effect for the local user (moderation.md §4.4).

    !actions!p<mono>              -> ''       every post/moderation
    !actions!c<ctx>               -> ''       a context whose hidden users were resolved
    !actions!u<ctx><pubkey>       -> <hash>   a hidden user in that context, and the action hiding them
    !actions!h<post hash>         -> <hash>   a hidden post, and the action hiding it
    !actions!d<post hash>         -> <hash>   a dropped post, and the action dropping it
    !actions!x<channel>           -> <hash>   a dropped channel, and the action dropping it
    !actions!v<ctx><mono>         -> ''       a relevant post/moderation (for moderation state requests)

``<ctx>`` as in ``!roles``: a channel with no ``c`` entry has the cabal's
hidden users.  All but the ``p`` entries are resolved from the set of posts by
:mod:`cablestore.moderation`.
"""

from cablestore.keyspace import keys
from cablestore.keyspace.keys import escape, mono, unescape
from cablestore.wire.codec import MODERATION

from .base import View

NAME = "actions"
PREFIX = keys.ACTIONS
CONTEXTS, HIDDEN_USERS, HIDDEN_POSTS, DROPPED_POSTS, DROPPED_CHANNELS, RELEVANT = (PREFIX + k for k in (b"c", b"u", b"h", b"d", b"x", b"v"))
EVERY_POST = PREFIX + b"p"  # the per-post rows: EVERY_POST<mono>
RESOLVED_PREFIXES = (CONTEXTS, HIDDEN_USERS, HIDDEN_POSTS, DROPPED_POSTS, DROPPED_CHANNELS, RELEVANT)


def entries(ip):
    if ip.post.post_type == MODERATION:
        return [(EVERY_POST + ip.mono, b"")]
    return []


def candidates_prefix() -> bytes:
    """Where every post/moderation has its ``p`` entry, oldest first."""
    return EVERY_POST


def context_key(context: str) -> bytes:
    return CONTEXTS + escape(context)


def context_of_key(key: bytes) -> str:
    """The context a ``c`` key names."""
    return unescape(key, len(CONTEXTS))[0]


def hidden_users_prefix(context: str) -> bytes:
    return HIDDEN_USERS + escape(context)


def hidden_post_key(post_hash: bytes) -> bytes:
    return HIDDEN_POSTS + post_hash


def dropped_post_key(post_hash: bytes) -> bytes:
    return DROPPED_POSTS + post_hash


def dropped_channel_key(channel: str) -> bytes:
    return DROPPED_CHANNELS + escape(channel)


def channel_of_dropped_key(key: bytes) -> bytes:
    """The escaped channel a ``x`` key names."""
    return key[len(DROPPED_CHANNELS) :]


def relevant_prefix(context: str) -> bytes:
    return RELEVANT + escape(context)


def resolved(state):
    """The resolved entries of a :class:`cablestore.moderation.State`."""
    fx = state.effects
    out = []
    for context, users in fx.hidden_users.items():
        if context:  # the cabal needs no marker: it is where every other channel falls back to
            out.append((context_key(context), b""))
        out += [(hidden_users_prefix(context) + user, a.hash) for user, a in users.items()]
    out += [(hidden_post_key(h), a.hash) for h, a in fx.hidden_posts.items()]
    out += [(dropped_post_key(h), a.hash) for h, a in fx.dropped_posts.items()]
    out += [(dropped_channel_key(c), a.hash) for c, a in fx.dropped_channels.items()]
    posts = {(a.context, a.timestamp, a.hash) for a in fx.relevant if isinstance(a.action, int)}
    out += [(relevant_prefix(c) + mono(ts, h), b"") for c, ts, h in posts]
    return out


class ActionsView(View):
    """The ``actions`` view: :data:`VIEW`."""

    NAME, PREFIX = NAME, PREFIX
    RESOLVED_PREFIXES = RESOLVED_PREFIXES
    entries = staticmethod(entries)
    candidates_prefix = staticmethod(candidates_prefix)
    resolved = staticmethod(resolved)


VIEW = ActionsView()
