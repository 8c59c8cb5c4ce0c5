"""``!chat``: post/text and post/delete hashes by channel and time.

Answers the channel time range request with one range scan.  A
``post/delete`` is listed under the channels of the posts it deleted, as its
tombstones recorded them (a deleted ``post/info`` counts for the channels its
author belonged to).

    !chat!<channel><mono> -> ''
"""

from cablestore.keyspace import keys
from cablestore.keyspace.keys import channel_key, escape
from cablestore.wire.codec import DELETE, TEXT

from .base import View

NAME = "chat"
PREFIX = keys.CHAT


def key(channel: str, mono: bytes) -> bytes:
    return PREFIX + channel_key(channel) + mono


def channel_prefix(channel: str) -> bytes:
    return escaped_prefix(channel_key(channel))


def escaped_prefix(channel_escaped: bytes) -> bytes:
    """Every ``!chat`` row of a channel (``<ch>`` escaped)."""
    return PREFIX + channel_escaped


def entries(ip):
    if ip.post.post_type == TEXT:
        return [(PREFIX + escape(ip.channel) + ip.mono, b"")]
    if ip.post.post_type == DELETE:
        channels = sorted({c for t in ip.tombstones for c in t.channels})
        return [(PREFIX + escape(c) + ip.mono, b"") for c in channels]
    return []


class ChatView(View):
    """The ``chat`` view: :data:`VIEW`."""

    NAME, PREFIX = NAME, PREFIX
    entries = staticmethod(entries)


VIEW = ChatView()
