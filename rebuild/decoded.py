"""The decoded table of ``cablestore export --decoded``: one row per stored post, its fields as columns.

For data teams (DuckDB, pandas, Spark SQL): hashes and keys are lowercase
hex, times are UTC, ``channel`` is the casefolded name the store files the
post under (``channel_spelling`` is the name as written).  Every field a
post type does not have is null; moderation posts (types 6-9) fill
``reason``, ``privacy``, ``recipients``, ``role``, ``action``, ``drop``,
``notify`` and ``undrop``.  The moderation columns (``hidden``,
``hidden_by``, ``post_hidden``, ``author_hidden_in_channel``,
``author_hidden_cabal``: ``rebuild/moderation_tables.py``) say what the
store's local user hides.  A column added later is appended, so a query
naming its columns keeps working.  The rebuild never reads this table.
"""

from __future__ import annotations

import pyarrow as pa

from cablestore.errors import CableError
from cablestore.wire.codec import POST_TYPE_NAMES, decode_post
from cablestore.wire.moderation import ACTION_NAMES, ROLE_NAMES

from .moderation_tables import COLUMNS, Moderation

_HEX_LIST = pa.list_(pa.string())
SCHEMA = pa.schema(
    [
        ("hash", pa.string()),
        ("type", pa.int8()),
        ("type_name", pa.string()),
        ("author", pa.string()),
        ("timestamp", pa.int64()),  # ms since the epoch, as the author claimed it
        ("time", pa.timestamp("ms", tz="UTC")),
        ("channel", pa.string()),
        ("channel_spelling", pa.string()),
        ("text", pa.string()),
        ("topic", pa.string()),
        ("name", pa.string()),  # post/info's "name", the usual info key
        ("info", pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))),
        ("links", _HEX_LIST),
        ("deleted", _HEX_LIST),  # post/delete: the hashes it deletes
        ("reason", pa.string()),
        ("privacy", pa.int8()),
        ("recipients", _HEX_LIST),  # public keys, or post hashes for post actions
        ("role", pa.int8()),
        ("role_name", pa.string()),
        ("action", pa.int8()),
        ("action_name", pa.string()),
        ("drop", pa.int8()),
        ("notify", pa.int8()),
        ("undrop", pa.int8()),
        ("size", pa.int32()),  # the post's bytes
        *COLUMNS,
    ]
)
_TIME_MAX = 253402300799999  # 9999-12-31T23:59:59.999Z: later claimed timestamps leave `time` null


def _hexes(values):
    return None if values is None else [v.hex() for v in values]


def row(h: bytes, blob: bytes, moderation: Moderation | None = None) -> dict | None:
    """The decoded row of one stored post, or None when its bytes do not decode; ``moderation`` fills the moderation columns."""
    try:
        p = decode_post(blob)
    except CableError:
        return None
    channel = p.channel
    info = p.info
    author = p.public_key.hex()
    hidden = {} if moderation is None else moderation.columns(p.post_type, h.hex(), author, channel)
    return {
        "hash": h.hex(),
        "type": p.post_type,
        "type_name": POST_TYPE_NAMES.get(p.post_type),
        "author": author,
        "timestamp": p.timestamp if p.timestamp < 1 << 63 else None,
        "time": p.timestamp if p.timestamp <= _TIME_MAX else None,
        "channel": channel.casefold() if channel is not None else None,
        "channel_spelling": channel,
        "text": p.text,
        "topic": p.topic,
        "name": dict(info).get("name") if info is not None else None,
        "info": [{"key": k, "value": v} for k, v in info] if info is not None else None,
        "links": _hexes(p.links),
        "deleted": _hexes(p.hashes),
        "reason": p.reason,
        "privacy": p.privacy,
        "recipients": _hexes(p.recipients),
        "role": p.role,
        "role_name": ROLE_NAMES.get(p.role),
        "action": p.action,
        "action_name": ACTION_NAMES.get(p.action),
        "drop": p.drop,
        "notify": p.notify,
        "undrop": p.undrop,
        "size": len(blob),
        **hidden,
    }


def batch(hashes, blobs, moderation: Moderation | None = None) -> tuple[pa.RecordBatch, int]:
    """``(record batch of the posts that decode, how many did not)``."""
    out = [r for r in (row(h, b, moderation) for h, b in zip(hashes, blobs, strict=True)) if r is not None]
    return pa.RecordBatch.from_pylist(out, schema=SCHEMA), len(hashes) - len(out)
