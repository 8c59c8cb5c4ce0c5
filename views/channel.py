"""``!channel``: current membership and topic of each channel.

A user is a member of a channel while their latest post/join, post/text or
post/topic there is newer than their latest post/leave (spec 5.4.3), so every
such post is a candidate; the latest topic is the newest post/topic.
"Latest" is the highest timestamp, ties broken by the higher hash.

    !channel!<channel>a<pubkey><mono> -> <post_type:u8>  candidates for membership
    !channel!<channel>m<pubkey>       -> 01 member / 00 left
    !channel!<channel>t               -> <topic>         latest topic (UTF-8)

Groups are ``b"m" + <channel> + <pubkey>`` and ``b"t" + <channel>``.
"""

from cablestore.keyspace import keys
from cablestore.keyspace.keys import escape
from cablestore.wire.codec import CHANNEL_TYPES, LEAVE, TOPIC

from . import state
from .base import View

NAME = "channel"
PREFIX = keys.CHANNEL
_MEMBERSHIP_TYPES = CHANNEL_TYPES  # every post to a channel: join, text, topic, leave


def entries(ip):
    if ip.post.post_type not in _MEMBERSHIP_TYPES:
        return []
    key = PREFIX + escape(ip.channel) + b"a" + ip.post.public_key + ip.mono
    return [(key, bytes([ip.post.post_type]))]


def groups(ip):
    t = ip.post.post_type
    if t not in _MEMBERSHIP_TYPES:
        return []
    channel = escape(ip.channel)
    out = [b"m" + channel + ip.post.public_key]
    if t == TOPIC:
        out.append(b"t" + channel)
    return out


def candidates(group):
    if group[:1] == b"m":
        return PREFIX + group[1:-32] + b"a" + group[-32:]
    return state.topic_prefix(group[1:])


def latest_prefix(group):
    if group[:1] == b"m":
        return PREFIX + group[1:-32] + b"m" + group[-32:]
    return PREFIX + group[1:] + b"t"


def latest_keys(group):
    """The one key ``latest`` writes for a group, known without reading."""
    return [latest_prefix(group)]


def latest(group, winner):
    if winner is None:
        return []
    if group[:1] == b"m":
        return [(latest_prefix(group), b"\x00" if winner.post.post_type == LEAVE else b"\x01")]
    return [(latest_prefix(group), winner.post.topic.encode("utf-8"))]


class ChannelView(View):
    """The ``channel`` view: :data:`VIEW`."""

    NAME, PREFIX = NAME, PREFIX
    entries = staticmethod(entries)
    groups = staticmethod(groups)
    candidates = staticmethod(candidates)
    latest = staticmethod(latest)
    latest_prefix = staticmethod(latest_prefix)
    latest_keys = staticmethod(latest_keys)


VIEW = ChannelView()
