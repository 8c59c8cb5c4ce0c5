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

from typing import NamedTuple

from cablestore.keyspace import keys
from cablestore.wire.codec import BLOCK, UNBLOCK

from .base import View

NAME = "blocks"
PREFIX = keys.BLOCKS
BLOCKED, UNBLOCKED, BLOCKERS, KEPT = PREFIX + b"b", PREFIX + b"u", PREFIX + b"n", PREFIX + b"k"
EVERY_POST = PREFIX + b"p"  # the per-post rows: EVERY_POST<mono>
RESOLVED_PREFIXES = (BLOCKED, UNBLOCKED, BLOCKERS, KEPT)
#: The rows that keep posts out (enforcement reads them): blocks, users whose notified block names the local user, kept-out posts.
KEEPING_OUT = (BLOCKED, KEPT, BLOCKERS)


class BlockRow(NamedTuple):
    """``!blocks!b<pubkey>``: the block in effect on a user."""

    by: bytes  # the post/block's hash
    drop: int
    notify: int
    timestamp: int


class UnblockRow(NamedTuple):
    """``!blocks!u<pubkey>``: the unblock in effect on a user."""

    by: bytes
    undrop: int


class SinceRow(NamedTuple):
    """``!blocks!n<pubkey>`` and ``!blocks!k<pubkey>``: the post that decided it, and from (``n``) or before (``k``) when."""

    by: bytes
    timestamp: int


def blocked_key(user: bytes) -> bytes:
    return BLOCKED + user


def blocked_user(key: bytes) -> bytes:
    """The user a ``!blocks!b<pubkey>`` key names."""
    return key[len(BLOCKED) :]


def unblocked_key(user: bytes) -> bytes:
    return UNBLOCKED + user


def blocker_key(user: bytes) -> bytes:
    return BLOCKERS + user


def kept_key(user: bytes) -> bytes:
    return KEPT + user


def encode_block(row: BlockRow) -> bytes:
    return row.by + bytes([row.drop, row.notify]) + row.timestamp.to_bytes(8, "big")


def decode_block(value: bytes) -> BlockRow:
    return BlockRow(value[:32], value[32], value[33], int.from_bytes(value[34:42], "big"))


def encode_unblock(row: UnblockRow) -> bytes:
    return row.by + bytes([row.undrop])


def decode_unblock(value: bytes) -> UnblockRow:
    return UnblockRow(value[:32], value[32])


def encode_since(row: SinceRow) -> bytes:
    return row.by + row.timestamp.to_bytes(8, "big")


def decode_since(value: bytes) -> SinceRow:
    return SinceRow(value[:32], int.from_bytes(value[32:40], "big"))


def entries(ip):
    if ip.post.post_type in (BLOCK, UNBLOCK):
        return [(EVERY_POST + ip.mono, b"")]
    return []


def candidates_prefix() -> bytes:
    """Where every post/block and post/unblock has its ``p`` entry, oldest first."""
    return EVERY_POST


def resolved(state):
    """The resolved entries of a :class:`cablestore.moderation.State`."""
    fx = state.effects
    out = [(blocked_key(user), encode_block(BlockRow(a.hash, *a.flags, a.timestamp))) for user, a in fx.blocked.items()]
    out += [(unblocked_key(user), encode_unblock(UnblockRow(a.hash, *a.flags))) for user, a in fx.unblocked.items()]
    out += [(blocker_key(blocker), encode_since(SinceRow(a.hash, a.timestamp))) for blocker, a in fx.blocks_of_local.items()]
    out += [(kept_key(user), encode_since(SinceRow(a.hash, a.timestamp))) for user, a in fx.kept_out.items()]
    return out


class BlocksView(View):
    """The ``blocks`` view: :data:`VIEW`."""

    NAME, PREFIX = NAME, PREFIX
    RESOLVED_PREFIXES = RESOLVED_PREFIXES
    entries = staticmethod(entries)
    candidates_prefix = staticmethod(candidates_prefix)
    resolved = staticmethod(resolved)


VIEW = BlocksView()
