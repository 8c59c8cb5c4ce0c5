"""``!blocks``: every post/block and post/unblock, and the blocks in effect for the local user (moderation.md §4.6).

    !blocks!p<mono>               -> ''                          every post/block and post/unblock
    !blocks!b<pubkey>             -> <hash><drop:u8><notify:u8><timestamp:u64>  a blocked user, and the block in effect
    !blocks!u<pubkey>             -> <hash><undrop:u8>           an unblocked user, and the unblock in effect
    !blocks!n<pubkey>             -> <hash><timestamp:u64>       a user whose notified block names the local user
    !blocks!k<pubkey>             -> <hash><timestamp:u64>       a user unblocked with undrop=0 after a dropping block:
                                                                 their posts before the unblock stay out

All but the ``p`` entries are resolved from the set of posts by
:mod:`cablestore.moderation`.
"""

from cablestore.keyspace import keys
from cablestore.wire.codec import BLOCK, UNBLOCK

from .base import View

NAME = "blocks"
PREFIX = keys.BLOCKS
RESOLVED_PREFIXES = (PREFIX + b"b", PREFIX + b"u", PREFIX + b"n", PREFIX + b"k")


def entries(ip):
    if ip.post.post_type in (BLOCK, UNBLOCK):
        return [(PREFIX + b"p" + ip.mono, b"")]
    return []



def candidates_prefix() -> bytes:
    """Where every post/block and post/unblock has its ``p`` entry, oldest first."""
    return PREFIX + b"p"


def resolved(state):
    """The resolved entries of a :class:`cablestore.moderation.State`."""
    fx = state.effects
    out = [(PREFIX + b"b" + user, a.hash + bytes(a.flags) + a.timestamp.to_bytes(8, "big")) for user, a in fx.blocked.items()]
    out += [(PREFIX + b"u" + user, a.hash + bytes(a.flags)) for user, a in fx.unblocked.items()]
    out += [(PREFIX + b"n" + blocker, a.hash + a.timestamp.to_bytes(8, "big")) for blocker, a in fx.blocks_of_local.items()]
    out += [(PREFIX + b"k" + user, a.hash + a.timestamp.to_bytes(8, "big")) for user, a in fx.kept_out.items()]
    return out


class BlocksView(View):
    """The ``blocks`` view: :data:`VIEW`."""

    NAME, PREFIX = NAME, PREFIX
    RESOLVED_PREFIXES = RESOLVED_PREFIXES
    entries = staticmethod(entries)
    candidates_prefix = staticmethod(candidates_prefix)
    resolved = staticmethod(resolved)


VIEW = BlocksView()
