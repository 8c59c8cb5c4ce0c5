"""``!author``: every post by public key and post type, in time order.

Lets a peer list what someone wrote and purge a blocked author.

    !author!<pubkey><type:u8><mono> -> ''
"""

from cablestore.keyspace import keys

from .base import View

NAME = "author"
PREFIX = keys.AUTHOR


def prefix(public_key: bytes, post_type: int | None = None) -> bytes:
    return PREFIX + public_key + (b"" if post_type is None else bytes([post_type]))


def entries(ip):
    return [(prefix(ip.post.public_key, ip.post.post_type) + ip.mono, b"")]


class AuthorView(View):
    """The ``author`` view: :data:`VIEW`."""

    NAME, PREFIX = NAME, PREFIX
    entries = staticmethod(entries)


VIEW = AuthorView()
