"""The decoded export carries moderation: hidden columns, the state tables, and docs/cluster.md's query of visible messages."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cablestore import Store, post_hash
from cablestore.cli import main
from cablestore.wire.codec import HIDE_POST

from . import moderation_helpers as mh
from .conftest import NOW, keypair

ROOT = Path(__file__).resolve().parent.parent
ZOE = keypair("zoe")
T0 = 1_700_000_000_000  # mh.cabal()'s


def _documented_query() -> str:
    """docs/cluster.md's query of visible messages per channel."""
    blocks = re.findall(r"```sql\n(.*?)```", (ROOT / "docs" / "cluster.md").read_text(), re.S)
    (query,) = [b for b in blocks if "NOT hidden" in b]
    return query


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A store of Ursula's moderated cabal (hides in a channel and cabal-wide, a hidden post, blocks, drops) and its decoded export."""
    d = tmp_path_factory.mktemp("export-moderation")
    chat = [
        mh.text(mh.EVE, T0 - 50, "general", "eve in general"),  # Eve is hidden in #dev only
        mh.text(mh.EVE, T0 - 49, "dev", "eve in dev"),
        mh.text(ZOE, T0 - 48, "general", "zoe in general"),  # Zoe is hidden cabal-wide
        mh.text(ZOE, T0 - 47, "dev", "zoe in dev"),
        mh.text(mh.BERT, T0 - 46, "general", "bert in general"),
        mh.text(mh.BERT, T0 - 45, "general", "a post hidden by itself"),
        mh.text(mh.ALEPH, T0 - 44, "random", "nobody hidden here"),
    ]
    hidden_post = chat[5][0]
    with Store(d / "store.ldb", now=lambda: NOW, local_user=mh.URSULA.public_key) as s:
        s.ingest_many([buf for buf, _ in chat])
        s.ingest_many(mh.cabal())
        later = [mh.hide(mh.ALEPH, ZOE, T0 + 60)[0], mh.act(mh.ALEPH, HIDE_POST, T0 + 61, [post_hash(hidden_post)], "general")[0]]
        assert all(r.ok for r in s.ingest_many(later))
        visible = {c: sum(1 for m in s.messages(c) if m.text is not None) for c in s.channel_list()}
        every = {c: sum(1 for m in s.messages(c, include_hidden=True) if m.text is not None) for c in s.channel_list()}
        summary = s.moderation_summary()
    assert main(["export", str(d / "store.ldb"), str(d / "snapshot"), "--decoded", "--partitions", "4", "--quiet"]) == 0
    return d, visible, every, summary, post_hash(hidden_post)


def test_the_documented_query_counts_the_visible_messages_the_store_shows(exported, monkeypatch):
    import duckdb

    d, visible, every, _, _ = exported
    monkeypatch.chdir(d)  # the query reads 'snapshot/...', as the docs show it
    got = duckdb.sql(_documented_query()).fetchall()
    assert dict(got) == {c: n for c, n in visible.items() if n}
    assert got == sorted(got)
    assert sum(every.values()) - sum(visible.values()) >= 4  # hidden messages were there to leave out
    assert visible["general"] < every["general"] and visible["dev"] < every["dev"]


def test_the_hidden_columns_say_why(exported):
    d, _, _, _, hidden_post = exported
    rows = pq.read_table(d / "snapshot" / "decoded").to_pylist()
    texts = {r["text"]: r for r in rows if r["type_name"] == "post/text"}
    eve_general, eve_dev, zoe_dev = texts["eve in general"], texts["eve in dev"], texts["zoe in dev"]
    assert not eve_general["hidden"] and eve_general["author_hidden_in_channel"] is False and not eve_general["author_hidden_cabal"]
    assert eve_dev["hidden"] and eve_dev["author_hidden_in_channel"] and not eve_dev["author_hidden_cabal"] and not eve_dev["post_hidden"]
    assert zoe_dev["hidden"] and zoe_dev["author_hidden_cabal"] and zoe_dev["author_hidden_in_channel"]
    by_itself = texts["a post hidden by itself"]
    assert by_itself["hash"] == hidden_post.hex() and by_itself["hidden"] and by_itself["post_hidden"] and not by_itself["author_hidden_in_channel"]
    assert len(by_itself["hidden_by"]) == 64
    assert not texts["nobody hidden here"]["hidden"] and texts["nobody hidden here"]["hidden_by"] is None
    joins = [r for r in rows if r["type_name"] == "post/join"]
    assert joins and not any(r["hidden"] for r in joins)  # only post/texts are hidden, as the store hides them


def test_the_moderation_tables_are_the_state_the_store_resolved(exported):
    d, _, _, summary, _ = exported
    manifest = json.loads((d / "snapshot" / "manifest.json").read_text())
    assert {"moderation/roles.parquet", "moderation/actions.parquet", "moderation/blocks.parquet"} <= set(manifest["files"])
    roles = pq.read_table(d / "snapshot" / "moderation" / "roles.parquet").to_pylist()
    assert {"channel": None, "public_key": mh.ALEPH.public_key.hex(), "role": "admin", "from_seed": False} in roles
    assert {(r["channel"] or "(cabal)", r["public_key"], r["role"]) for r in roles} == {(c, k, v) for c, table in summary["roles"].items() for k, v in table.items()}
    assert {r["channel"] for r in roles} == {None, "dev"}  # per context
    actions = pq.read_table(d / "snapshot" / "moderation" / "actions.parquet").to_pylist()
    hides = {(a["channel"], a["target"]) for a in actions if a["action"] == "hide user"}
    assert (None, ZOE.public_key.hex()) in hides and ("dev", mh.EVE.public_key.hex()) in hides
    assert {a["target"] for a in actions if a["action"] == "drop channel"} == {"junk"}
    blocks = pq.read_table(d / "snapshot" / "moderation" / "blocks.parquet").to_pylist()
    assert {(b["public_key"], b["kind"]) for b in blocks} == (
        {(k, "block") for k in summary["blocks"]} | {(k, "unblock") for k in summary["unblocks"]} | {(k, "blocked by") for k in summary["blocked_by"]}
    )
    assert (mh.EVE.public_key.hex(), "block") in {(b["public_key"], b["kind"]) for b in blocks}
