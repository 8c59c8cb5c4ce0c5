"""The derived views, one module each, all of the same shape.

Every module defines:

``NAME``, ``PREFIX``
    The view's name and the key prefix all its entries live under.
``entries(ip) -> list[(key, value)]``
    The entries one indexed post contributes (pure function of the post and,
    for a ``post/delete``, the tombstones it made).
``groups(ip) -> list[bytes]``
    The "latest" groups the post competes in (empty for plain views).
Views whose ``groups`` can be non-empty (``user``, ``channel``, ``links``)
also define:

``candidates(group) -> bytes``
    The key prefix under which every post of the group has one entry ending
    in its mono timestamp, so the latest is one reverse seek away.
``latest(group, winner) -> list[(key, value)]``
    The entries of a group given its latest post (``None``: no post left).
``latest_prefix(group) -> bytes``
    The prefix every key ``latest`` can write for the group starts with
    (or ``latest_keys(group, txn)``: the keys it wrote that the DB holds,
    found with ``txn.scan(prefix)`` or ``txn.db``, or known without reading, when no one prefix holds them).
``rank(group, ip) -> bytes`` (optional)
    The suffix of the post's candidate key after ``candidates(group)``; the
    highest rank is the latest.  Default: the mono timestamp.

The live store and the rebuild (local and Spark) call these functions and
nothing else to know what a view holds.
"""

from . import author, channel, chat, links, state, user

VIEWS = (chat, state, author, user, channel, links)
BY_NAME = {v.NAME: v for v in VIEWS}


def entries(ip):
    """All derived per-post entries of one indexed post, in view order."""
    out = []
    for view in VIEWS:
        out.extend(view.entries(ip))
    return out


def groups(ip):
    """``(view, group)`` pairs whose latest entries may change with this post."""
    return [(view, g) for view in VIEWS for g in view.groups(ip)]


def rank(view, group: bytes, ip) -> bytes:
    """How ``ip`` ranks among the candidates of ``group``: the greatest is the latest."""
    ranker = getattr(view, "rank", None)
    return ip.mono if ranker is None else ranker(group, ip)


def latest_keys(view, group: bytes, txn) -> list[bytes]:
    """The keys ``view.latest`` wrote for ``group`` that the DB holds (``txn``: a ``cablestore.txn.Txn``)."""
    locate = getattr(view, "latest_keys", None)
    if locate is not None:
        return locate(group, txn)
    return [key for key, _ in txn.scan(view.latest_prefix(group))]
