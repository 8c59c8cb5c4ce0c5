"""``!links``: who links to a hash, and each channel's heads (spec 5.1.2).

A post's own links are in its bytes (and its ``!rev!`` entry); this view
indexes them the other way round, and keeps the heads an author links a new
post to: posts of a linkable type (text, topic, join, leave) that no stored
post links to (spec 5.1.2.1).

    !links!r<target>l<mono>  -> ''     the post ending the key links to target
    !links!r<hash>a<mono>    -> <ch>   the post itself, when it is linkable
    !links!h<ch><hash>       -> ''     a head of channel <ch>

Heads are derived like the other "latest" entries, so the live store and both
rebuild engines share one definition.  The group of a hash is the hash: its
candidates are its own ``a`` entry (when the post is stored and linkable) and
one ``l`` entry per stored post linking to it (known or not: a link to an
unknown hash counts, so the post is not a head when it arrives).  Candidates
rank by the key suffix, and every ``l`` sorts after the ``a``, so the "latest"
candidate is the post itself exactly when nothing links to it: then it is a
head.  A removed post's ``l`` entries go with it, so it stops counting as a
linker and the posts it linked to can become heads again.
"""

from cablestore.codec import CHANNEL_TYPES
from cablestore.keys import channel_key, escape

NAME = "links"
PREFIX = b"!links!"
LINKABLE = CHANNEL_TYPES  # spec 5.1.2.1 linkableTypes: text, topic, join, leave
_SELF, _LINKER = b"a", b"l"


def linkers_prefix(target: bytes) -> bytes:
    """Keys of the stored posts that link to ``target``."""
    return PREFIX + b"r" + target + _LINKER


def heads_prefix(channel: str) -> bytes:
    return PREFIX + b"h" + channel_key(channel)


def _head_key(channel_escaped: bytes, h: bytes) -> bytes:
    return PREFIX + b"h" + channel_escaped + h


def _linkable(ip) -> bool:
    return ip.post.post_type in LINKABLE


def entries(ip):
    out = [(linkers_prefix(target) + ip.mono, b"") for target in dict.fromkeys(ip.post.links)]
    if _linkable(ip):
        out.append((PREFIX + b"r" + ip.hash + _SELF + ip.mono, escape(ip.channel)))
    return out


def groups(ip):
    own = [ip.hash] if _linkable(ip) else []
    return own + [t for t in dict.fromkeys(ip.post.links) if t != ip.hash]


def candidates(group):
    return PREFIX + b"r" + group


def rank(group, ip) -> bytes:
    """The suffix of ``ip``'s candidate key in ``group``: linkers outrank the post itself."""
    return (_SELF if ip.hash == group else _LINKER) + ip.mono


def latest_keys(group, scan):
    """The head key ``group`` has in the DB, if any (its channel is in the post's own entry)."""
    own = scan(PREFIX + b"r" + group + _SELF)
    return [key for _, channel in own for key, _ in scan(_head_key(channel, group))]


def latest(group, winner):
    if winner is None or winner.hash != group or not _linkable(winner):
        return []
    return [(_head_key(escape(winner.channel), group), b"")]
