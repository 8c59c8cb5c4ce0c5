"""``!links``: each channel's heads (spec 5.1.2.1), and who links to a hash.

A post's own links are in its bytes.  This view indexes them the other way
round, and keeps the heads an author links a new post to: posts of a
linkable type (text, topic, join, leave) that no stored post links to.

    !rev!<target>l<hash>   -> ''   the stored post <hash> links to <target>
    !links!h<ch><hash>     -> ''   a head of channel <ch>

Heads are derived like the other "latest" entries, so the live store and both
rebuild engines share one definition.  The group of a hash is the hash; its
candidates are the post itself (``OWN_CANDIDATE``: ranked ``b""``, when it is
stored) and one ``l`` entry per stored post linking to it, known or not (so
a post linked before it arrives is no head when it does), ranked by the
linker's hash.  Any linker outranks the post, so the "latest" candidate is
the post itself exactly when nothing links to it: then, if it is linkable, it
is a head.  A removed post's ``l`` entries go with it, so it stops counting
as a linker and what it alone linked is a head again.

Format 1 kept a reverse entry ``!rev!<hash>`` per post, which sorted first in
the group; format 2 has none (docs/keyspace-format-1.md): "head" is "no
``l`` entry, and the post stored", and a head key's channel comes from the
post's own bytes.
"""

from cablestore.errors import CableError
from cablestore.keyspace import keys
from cablestore.keyspace.keys import REVERSE as REV
from cablestore.keyspace.keys import channel_key, escape
from cablestore.keyspace.records import Indexed
from cablestore.wire.codec import CHANNEL_TYPES, decode_post, post_type_of

from .base import View

NAME = "links"
PREFIX = keys.LINKS
LINKABLE = CHANNEL_TYPES  # spec 5.1.2.1 linkableTypes: text, topic, join, leave
HEADS = PREFIX + b"h"  # a channel's heads: HEADS<ch><hash>
LINKER = b"l"  # REV<target>l<linker hash>


def linkers_prefix(target: bytes) -> bytes:
    """Keys of the stored posts that link to ``target``."""
    return REV + target + LINKER


def heads_prefix(channel: str) -> bytes:
    return HEADS + channel_key(channel)


def _head_key(channel: str, h: bytes) -> bytes:
    return HEADS + escape(channel) + h


def _linkable(ip) -> bool:
    return ip.post.post_type in LINKABLE


def entries(ip):
    links = ip.post.links
    if len(links) == 1:  # the common case: no duplicates to drop
        return [(REV + links[0] + LINKER + ip.hash, b"")]
    return [(linkers_prefix(target) + ip.hash, b"") for target in dict.fromkeys(links)]


def groups(ip):
    h = ip.hash
    own = [h] if ip.post.post_type in LINKABLE else []
    return own + [t for t in dict.fromkeys(ip.post.links) if t != h]


def candidates(group):
    return REV + group + LINKER


def rank(group, ip) -> bytes:
    """The suffix of ``ip``'s candidate key in ``group`` (the linker's hash); empty for the post itself, so linkers outrank it."""
    return b"" if ip.hash == group else ip.hash


def latest_keys_from_post(group, blob, channel_names):
    """The head key ``group`` may have in the DB: its channel is in the stored post's bytes ``blob`` (None: not stored).

    Named without reading the head key: a post that gets linked was nearly
    always a head, and deleting an absent key costs less than the read that
    would skip it.
    """
    if blob is None:
        return []
    try:
        ip = Indexed.of(blob, decode_post(blob), group)
    except CableError:
        # A damaged post names no channel: every channel's head key of the
        # post, so removing the post still removes its head key.
        return [_head_key(c, group) for c in channel_names()]
    return [_head_key(ip.channel, group)] if _linkable(ip) else []


def latest(group, winner):
    if winner is None or winner.hash != group or not _linkable(winner):
        return []
    return [(_head_key(winner.channel, group), b"")]


def latest_needs_winner(group, rank: bytes) -> bool:
    """Only the post itself (rank ``b""``: nothing links to it) can be a head; a linker (any higher rank) never is."""
    return rank == b""


def bulk_latest(post_keys, linker_keys, get, skip=frozenset()):
    """:func:`latest` of every group at once: a merge of the ``!post!`` keys and the ``!rev!<target>l<hash>`` keys, both in key order.

    A post is a head when no linker key names it as its target (its own
    candidate is then the latest) and it is linkable; only those posts are
    read (``get(key)``) and decoded.  ``skip``: hashes of stored posts the
    caller did not index (faults), which have no head.  Nothing is held but
    the next linker target.
    """
    linked = _targets(linker_keys)
    target = next(linked, None)
    start = len(keys.POSTS)
    for key in post_keys:
        h = key[start:]
        while target is not None and target < h:
            target = next(linked, None)
        if h == target or h in skip or len(h) != 32:
            continue
        blob = get(key)
        if blob is None or post_type_of(blob) not in LINKABLE:
            continue
        try:
            ip = Indexed.of(blob, decode_post(blob), h)
        except CableError:
            continue  # a damaged post: the rebuild reports it, it has no entries
        yield from latest(h, ip)


def _targets(linker_keys):
    """The distinct targets of linker keys in key order."""
    start, last = len(REV), None
    for key in linker_keys:
        target = key[start : start + 32]
        if target != last:
            last = target
            yield target


class LinksView(View):
    """The ``links`` view: :data:`VIEW`."""

    NAME, PREFIX = NAME, PREFIX
    HEADS = HEADS
    LATEST_FROM_POST = True
    OWN_CANDIDATE = True
    BULK_LATEST = True
    BULK_PREFIX = REV  # where bulk_latest's own keys are: the linker entries
    entries = staticmethod(entries)
    groups = staticmethod(groups)
    candidates = staticmethod(candidates)
    rank = staticmethod(rank)
    latest = staticmethod(latest)
    latest_needs_winner = staticmethod(latest_needs_winner)
    latest_keys_from_post = staticmethod(latest_keys_from_post)
    bulk_latest = staticmethod(bulk_latest)


VIEW = LinksView()
