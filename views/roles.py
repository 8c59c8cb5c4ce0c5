"""``!roles``: every post/role, and the roles in effect for the local user (moderation.md §4.2).

    !roles!p<mono>                -> <recipient>             every post/role, and whom it names
    !roles!c<ctx>                 -> ''                      a context whose roles were resolved
    !roles!r<ctx><pubkey>         -> <role:u8><hash>         an admin (0) or mod (1) in that context,
                                                             and the post/role that decided it
    !roles!v<ctx><mono>           -> ''                      a relevant post/role (for moderation state requests)

``<ctx>`` is the escaped canonical channel, or the escaped empty string for
the whole cabal; a channel with no ``c`` entry has the cabal's roles.  The
``p`` entries are per post; the others are resolved from all of them by
:mod:`cablestore.moderation` (``resolved``), so they change only with the set
of posts, never with their order.
"""

from typing import NamedTuple

from cablestore.keyspace import keys
from cablestore.keyspace.keys import escape, mono, unescape
from cablestore.wire.codec import ROLE

from .base import View

NAME = "roles"
PREFIX = keys.ROLES
CONTEXTS, ROLES, RELEVANT = PREFIX + b"c", PREFIX + b"r", PREFIX + b"v"
EVERY_POST = PREFIX + b"p"  # the per-post rows: EVERY_POST<mono>
RESOLVED_PREFIXES = (CONTEXTS, ROLES, RELEVANT)


class RoleRow(NamedTuple):
    """``!roles!r<ctx><pubkey>``: a user's role in a context and the post/role (or the seed) that decided it."""

    role: int
    by: bytes


def encode_role(row: RoleRow) -> bytes:
    return bytes([row.role]) + row.by


def decode_role(value: bytes) -> RoleRow:
    return RoleRow(value[0], value[1:33])


def entries(ip):
    if ip.post.post_type == ROLE:
        return [(EVERY_POST + ip.mono, ip.post.recipients[0] if ip.post.recipients else b"")]
    return []


def candidates_prefix() -> bytes:
    """Where every post/role has its ``p`` entry, oldest first."""
    return EVERY_POST


def context_key(context: str) -> bytes:
    return CONTEXTS + escape(context)


def context_of_key(key: bytes) -> str:
    """The context a ``c`` key names."""
    return unescape(key, len(CONTEXTS))[0]


def role_prefix(context: str) -> bytes:
    return ROLES + escape(context)


def relevant_prefix(context: str) -> bytes:
    return RELEVANT + escape(context)


def resolved(state):
    """The resolved entries of a :class:`cablestore.moderation.State`."""
    out = []
    for context, table in state.roles.roles.items():
        if context:  # the cabal needs no marker: it is where every other channel falls back to
            out.append((context_key(context), b""))
        out += [(role_prefix(context) + user, encode_role(RoleRow(role, h))) for user, (role, h) in table.items()]
    out += [(relevant_prefix(r.context) + mono(r.timestamp, r.hash), b"") for r in state.roles.relevant]
    return out


class RolesView(View):
    """The ``roles`` view: :data:`VIEW`."""

    NAME, PREFIX = NAME, PREFIX
    RESOLVED_PREFIXES = RESOLVED_PREFIXES
    entries = staticmethod(entries)
    candidates_prefix = staticmethod(candidates_prefix)
    resolved = staticmethod(resolved)


VIEW = RolesView()
