"""``!links``: each channel's heads (spec 5.1.2.1), and who links to a hash.

A post's own links are in its bytes (and its ``!rev!`` entry).  This view
indexes them the other way round, next to the target's own reverse entry,
and keeps the heads an author links a new post to: posts of a linkable type
(text, topic, join, leave) that no stored post links to.

    !rev!<target>l<hash>   -> ''   the stored post <hash> links to <target>
    !links!h<ch><hash>     -> ''   a head of channel <ch>

Heads are derived like the other "latest" entries, so the live store and both
rebuild engines share one definition.  The group of a hash is the hash; its
candidates are the keys under ``!rev!<hash>``: the post's own reverse entry
(when it is stored) and one ``l`` entry per stored post linking to it, known
or not (so a post linked before it arrives is no head when it does).
Candidates rank by their key suffix: the post's own entry has none, so any
linker outranks it, and the "latest" candidate is the post itself exactly
when nothing links to it: then, if it is linkable, it is a head.  A removed
post's ``l`` entries go with it, so it stops counting as a linker and what it
alone linked is a head again.  Keeping the ``l`` entries beside the target's
reverse entry costs no key of its own for the post and lets LevelDB share
their 37-byte prefix.
"""

from msgpack import UnpackException

from cablestore.compiled import native as _native
from cablestore.keyspace import keys
from cablestore.keyspace.keys import channel_key, escape
from cablestore.keyspace.reverse import PREFIX as REV
from cablestore.keyspace.reverse import channel_of, stand_in
from cablestore.wire.codec import CHANNEL_TYPES

from .base import View

NAME = "links"
PREFIX = keys.LINKS
LINKABLE = CHANNEL_TYPES  # spec 5.1.2.1 linkableTypes: text, topic, join, leave
HEADS = PREFIX + b"h"  # a channel's heads: HEADS<ch><hash>
_LINKER = b"l"


def linkers_prefix(target: bytes) -> bytes:
    """Keys of the stored posts that link to ``target``."""
    return REV + target + _LINKER


def heads_prefix(channel: str) -> bytes:
    return HEADS + channel_key(channel)


def _head_key(channel: str, h: bytes) -> bytes:
    return HEADS + escape(channel) + h


def _linkable(ip) -> bool:
    return ip.post.post_type in LINKABLE


def entries(ip):
    links = ip.post.links
    if len(links) == 1:  # the common case: no duplicates to drop
        return [(REV + links[0] + _LINKER + ip.hash, b"")]
    return [(linkers_prefix(target) + ip.hash, b"") for target in dict.fromkeys(links)]


def groups(ip):
    h = ip.hash
    own = [h] if ip.post.post_type in LINKABLE else []
    return own + [t for t in dict.fromkeys(ip.post.links) if t != h]


def candidates(group):
    return REV + group


def rank(group, ip) -> bytes:
    """The suffix of ``ip``'s candidate key in ``group``: empty for the post itself, so linkers outrank it."""
    return b"" if ip.hash == group else _LINKER + ip.hash


def latest_keys_from_reverse(group, rev, channel_names):
    """The head key ``group`` may have in the DB: its channel is in the post's reverse entry ``rev``.

    Named without reading it: a post that gets linked was nearly always a
    head, and deleting an absent key costs less than the read that would
    skip it (one read fewer per ingested post).
    """
    channel = None if rev is None else channel_of(rev)
    if channel is not None:
        return [_head_key(channel, group)]
    if rev is not None and not _readable(rev):
        # A damaged reverse entry names no channel: every channel's head key of
        # the post, so removing the post still removes its head key.
        return [_head_key(c, group) for c in channel_names()]
    return []


def _readable(rev: bytes) -> bool:
    try:
        stand_in(b"", rev)
        return True
    except (ValueError, TypeError, AttributeError, IndexError, UnpackException):
        return False


def latest(group, winner):
    if winner is None or winner.hash != group or not _linkable(winner):
        return []
    return [(_head_key(winner.channel, group), b"")]


def latest_needs_winner(group, rank: bytes) -> bool:
    """Only the post itself (rank ``b""``: nothing links to it) can be a head; a linker (any higher rank) never is."""
    return rank == b""


def bulk_latest(reverse_keys, get):
    """:func:`latest` of every group at once, from the ``!rev!`` keys in key order.

    A group's candidates are the keys under ``!rev!<hash>``, and its winner is
    the last of them: the post's own entry when no ``l`` entry follows it.
    Then the winner is the post, whose reverse entry (``get(key)``) holds all
    ``latest`` reads of it (type, channel); otherwise the winner is a
    linker, which ``latest`` never makes a head.  Nothing is held but the
    previous key, and only the unlinked posts' entries are read.
    """
    if _native is not None:  # the compiled loop (cablestore.compiled): the same entries
        return _native.links_bulk_latest(reverse_keys, get, len(REV), channel_of, escape, _latest_of)
    return _bulk_latest_py(reverse_keys, get)


def _bulk_latest_py(reverse_keys, get):
    own = None  # the last post entry's key, not yet seen linked
    start = len(REV)
    for key in reverse_keys:
        if len(key) == start + 32:
            if own is not None:
                yield from _latest_of(own, get)
            own = key
        elif own is not None and key[start : start + 32] == own[start:]:
            own = None  # a linker outranks the post
    if own is not None:
        yield from _latest_of(own, get)


def _latest_of(own_key: bytes, get):
    return latest(own_key[len(REV) :], stand_in(own_key[len(REV) :], get(own_key)))


class LinksView(View):
    """The ``links`` view: :data:`VIEW`."""

    NAME, PREFIX = NAME, PREFIX
    HEADS = HEADS
    LATEST_FROM_REVERSE = True
    BULK_LATEST = True
    entries = staticmethod(entries)
    groups = staticmethod(groups)
    candidates = staticmethod(candidates)
    rank = staticmethod(rank)
    latest = staticmethod(latest)
    latest_needs_winner = staticmethod(latest_needs_winner)
    latest_keys_from_reverse = staticmethod(latest_keys_from_reverse)
    bulk_latest = staticmethod(bulk_latest)


VIEW = LinksView()
