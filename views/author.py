"""``!author!``: every post by public key and post type, in time order.

Lets a peer list what someone wrote and purge a blocked author.  A channel
post (post/text, post/topic, post/join, post/leave) carries its channel
between the type and the time, so an author's posts of one type in one
channel are one prefix: the ``!channel`` view finds a removed membership
winner's successor with a reverse seek under each of the four
(:func:`views.channel.candidates`), never a walk over the author's other
channels.  Listing an author's posts of one type across channels therefore
sorts by the trailing ``<mono>``.

    !author!<pubkey><type:u8><mono>       -> ''   post/delete, post/info, types 6-9
    !author!<pubkey><type:u8><ch><mono>   -> ''   the channel posts (types 0, 3, 4, 5)
"""

from typing import NamedTuple

from cablestore.errors import CorruptRecordError
from cablestore.keyspace import keys
from cablestore.keyspace.keys import escape
from cablestore.wire.codec import CHANNEL_TYPES

from .base import View

NAME = "author"
PREFIX = keys.AUTHOR


def prefix(public_key: bytes, post_type: int | None = None) -> bytes:
    return PREFIX + public_key + (b"" if post_type is None else bytes([post_type]))


def channel_prefix(public_key: bytes, post_type: int, channel_escaped: bytes) -> bytes:
    """``!author!<pubkey><type><ch>``: an author's posts of one channel type in one channel (``<ch>`` escaped, terminated)."""
    return PREFIX + public_key + bytes([post_type]) + channel_escaped


_KEY_MIN = len(PREFIX) + 32 + 1 + keys.MONO_SIZE  # the shortest author key: no channel


class AuthorRow(NamedTuple):
    """What an ``!author!`` key says of its post."""

    author: bytes
    post_type: int
    channel: str | None  # the channel posts' (types 0, 3, 4, 5); None for the others
    timestamp: int
    hash: bytes


def decode_key(key: bytes) -> AuthorRow | None:
    """The post an ``!author!`` key names; None for a key too damaged to read."""
    if not key.startswith(PREFIX) or len(key) < _KEY_MIN:
        return None
    start = len(PREFIX)
    author, post_type = key[start : start + 32], key[start + 32]
    channel = None
    if post_type in CHANNEL_TYPES:
        try:
            channel, end = keys.unescape(key, start + 33)
        except CorruptRecordError:
            return None
        if len(key) - end != keys.MONO_SIZE:
            return None
    elif len(key) != _KEY_MIN:
        return None
    return AuthorRow(author, post_type, channel, keys.mono_timestamp(key), key[-32:])


def author_of_key(key: bytes) -> bytes:
    """The author an ``!author!`` key names (no check: a scan of every key calls it)."""
    return key[len(PREFIX) : len(PREFIX) + 32]


def type_of_key(key: bytes) -> int:
    """The post type an ``!author!`` key names (no check)."""
    return key[len(PREFIX) + 32]


def hashes(author_keys) -> set[bytes]:
    """The post hashes ``!author!`` keys end in (a key too short to hold one is skipped): every indexed post has one."""
    return {k[-32:] for k in author_keys if len(k) >= _KEY_MIN}


def entries(ip):
    t = ip.post.post_type
    if t in CHANNEL_TYPES:
        return [(channel_prefix(ip.post.public_key, t, escape(ip.channel)) + ip.mono, b"")]
    return [(prefix(ip.post.public_key, t) + ip.mono, b"")]


class AuthorView(View):
    """The ``author`` view: :data:`VIEW`."""

    NAME, PREFIX = NAME, PREFIX
    entries = staticmethod(entries)


VIEW = AuthorView()
