"""``!state``: every join/leave per channel and member, every topic per channel.

Answers channel state requests: the latest of each is one reverse seek, the
historic variant is one scan.  (The latest post/info of each member comes from
the ``!user`` view.)

    !state!<channel>m<pubkey><mono> -> ''   post/join, post/leave
    !state!<channel>t<mono>         -> ''   post/topic
    !state!<channel>l<pubkey>       -> <hash>  the member's latest post/join or post/leave
"""

from cablestore.keyspace import keys
from cablestore.keyspace.keys import channel_key, escape
from cablestore.wire.codec import JOIN, LEAVE, TOPIC

from .base import View

NAME = "state"
PREFIX = keys.STATE
MEMBER_ROWS, TOPIC_ROWS = b"m", b"t"  # !state!<ch>m<pubkey><mono>, !state!<ch>t<mono>
LATEST_ROWS = b"l"  # !state!<ch>l<pubkey> -> <hash>: the latest join/leave of each member


def member_prefix(channel: str, public_key: bytes = b"") -> bytes:
    return members_prefix(channel_key(channel)) + public_key


def members_prefix(channel_escaped: bytes) -> bytes:
    """Every join/leave of a channel (``<ch>`` escaped)."""
    return PREFIX + channel_escaped + MEMBER_ROWS


def topic_prefix(channel_escaped: bytes) -> bytes:
    return PREFIX + channel_escaped + TOPIC_ROWS


def entries(ip):
    t = ip.post.post_type
    if t in (JOIN, LEAVE):
        return [(PREFIX + escape(ip.channel) + MEMBER_ROWS + ip.post.public_key + ip.mono, b"")]
    if t == TOPIC:
        return [(topic_prefix(escape(ip.channel)) + ip.mono, b"")]
    return []


def groups(ip):
    if ip.post.post_type in (JOIN, LEAVE):
        return [escape(ip.channel) + ip.post.public_key]
    return []


def candidates(group):
    return PREFIX + group[:-32] + MEMBER_ROWS + group[-32:]


def latest_prefix(group):
    return latest_members_prefix(group[:-32]) + group[-32:]


def latest_keys(group):
    """The one key ``latest`` writes for a group, known without reading."""
    return [latest_prefix(group)]


def latest(group, winner):
    return [] if winner is None else [(latest_prefix(group), winner.hash)]


def latest_per_member_prefix(channel: str) -> bytes:
    return latest_members_prefix(channel_key(channel))


def latest_members_prefix(channel_escaped: bytes) -> bytes:
    """The latest join/leave of each member of a channel (``<ch>`` escaped): one row each, its hash the value."""
    return PREFIX + channel_escaped + LATEST_ROWS


class StateView(View):
    """The ``state`` view: :data:`VIEW`."""

    NAME, PREFIX = NAME, PREFIX
    entries = staticmethod(entries)
    groups = staticmethod(groups)
    candidates = staticmethod(candidates)
    latest = staticmethod(latest)
    latest_prefix = staticmethod(latest_prefix)
    latest_keys = staticmethod(latest_keys)


VIEW = StateView()
