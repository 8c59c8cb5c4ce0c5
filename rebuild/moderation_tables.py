"""The moderation a decoded export carries (``cablestore export --decoded``, docs/cluster.md, "The moderation tables").

The state is the one the store resolved for its local user (what
``cablestore moderation`` prints), read from the export's own LevelDB
snapshot, so it agrees with the posts exported.  Two things come of it:

* the hidden columns of the decoded table (``rebuild/decoded.py``):
  ``hidden`` (the post is left out of its channel as ``show`` and
  :meth:`cablestore.Store.messages` leave it out: a post/text hidden, or
  whose author is hidden in its channel), ``hidden_by``, ``post_hidden``,
  ``author_hidden_in_channel`` and ``author_hidden_cabal``;
* the state tables, Parquet files beside the posts::

    moderation/roles.parquet     channel (null: the cabal), public_key, role ("admin", "mod"), from_seed
    moderation/actions.parquet   action ("hide user", "hide post", "drop post", "drop channel"),
                                 channel (null: the cabal), target, by
    moderation/blocks.parquet    public_key, kind ("block", "unblock", "blocked by"), by, drop, notify, undrop

Keys and hashes are lowercase hex; ``by`` is the hash of the post that
decides the row.  A store without a local user applies no moderation: its
tables are empty (but for no row) and nothing is hidden.
"""

from __future__ import annotations

import pyarrow as pa

from cablestore.keyspace.keys import canonical_channel
from cablestore.wire.codec import TEXT

CABAL = "(cabal)"  # the cabal context, as the moderation summary names it

_S, _B, _I8 = pa.string(), pa.bool_(), pa.int8()
SCHEMAS = {
    "moderation/roles": pa.schema([("channel", _S), ("public_key", _S), ("role", _S), ("from_seed", _B)]),
    "moderation/actions": pa.schema([("action", _S), ("channel", _S), ("target", _S), ("by", _S)]),
    "moderation/blocks": pa.schema([("public_key", _S), ("kind", _S), ("by", _S), ("drop", _I8), ("notify", _I8), ("undrop", _I8)]),
}
#: The decoded table's moderation columns, appended to its schema.
COLUMNS = [("hidden", _B), ("hidden_by", _S), ("post_hidden", _B), ("author_hidden_in_channel", _B), ("author_hidden_cabal", _B)]


def _channel(context: str) -> str | None:
    return None if context == CABAL else context


class Moderation:
    """The resolved state of one snapshot (``summary``: :func:`cablestore.store.read.moderation.snapshot_moderation`)."""

    def __init__(self, summary: dict) -> None:
        self.summary = summary
        self._posts: dict[str, str] = summary["hidden_posts"]  # post hash -> the hiding action
        self._users = {"" if c == CABAL else c: table for c, table in summary["hidden_users"].items()}  # context -> key -> action

    def columns(self, post_type: int, h: str, author: str, channel: str | None) -> dict:
        """The moderation columns of one post (hash and author in hex)."""
        cabal = self._users.get("", {})
        # A channel resolved on its own has its table (the cabal's hides included); else the cabal's applies.
        here = None if channel is None else self._users.get(canonical_channel(channel), cabal)
        by_post = self._posts.get(h)
        by_author = None if here is None else here.get(author)
        hider = (by_post or by_author) if post_type == TEXT else None  # as Store.messages: only post/texts are hidden
        return {
            "hidden": hider is not None,
            "hidden_by": hider,
            "post_hidden": by_post is not None,
            "author_hidden_in_channel": None if here is None else by_author is not None,
            "author_hidden_cabal": author in cabal,
        }

    def tables(self) -> dict[str, pa.RecordBatch]:
        """The state tables, by file name (without ``.parquet``)."""
        s = self.summary
        roles = [
            {"channel": _channel(c), "public_key": k, "role": role, "from_seed": k in s["roles_from_seed"].get(c, ())}
            for c, table in s["roles"].items()
            for k, role in sorted(table.items())
        ]
        actions = [{"action": "hide user", "channel": _channel(c), "target": k, "by": by} for c, table in s["hidden_users"].items() for k, by in sorted(table.items())]
        actions += [{"action": "hide post", "channel": None, "target": h, "by": by} for h, by in sorted(s["hidden_posts"].items())]
        actions += [{"action": "drop post", "channel": None, "target": h, "by": by} for h, by in sorted(s["dropped_posts"].items())]
        actions += [{"action": "drop channel", "channel": ch, "target": ch, "by": by} for ch, by in sorted(s["dropped_channels"].items())]
        blocks = [{"public_key": k, "kind": "block", **v} for k, v in sorted(s["blocks"].items())]
        blocks += [{"public_key": k, "kind": "unblock", **v} for k, v in sorted(s["unblocks"].items())]
        blocks += [{"public_key": k, "kind": "blocked by", "by": by} for k, by in sorted(s["blocked_by"].items())]
        rows = {"moderation/roles": roles, "moderation/actions": actions, "moderation/blocks": blocks}
        return {name: pa.RecordBatch.from_pylist(rows[name], schema=schema) for name, schema in SCHEMAS.items()}
