"""Each view encodes and decodes its own rows: typed rows round-trip, no reader outside views/ spells a
view's sub-keys, and the compiled twins take their sub-keys from the views."""

from __future__ import annotations

import re
from pathlib import Path

from cablestore import Store
from cablestore.compiled import native
from cablestore.views import SUBKEYS, actions, blocks, roles
from cablestore.wire.codec import ADMIN

from .conftest import NOW
from .moderation_helpers import ALEPH, URSULA, XU, block, role, text

ROOT = Path(__file__).resolve().parents[1]
H = bytes(range(32))


def test_block_rows_round_trip():
    row = blocks.BlockRow(H, 1, 0, 1_700_000_000_123)
    assert blocks.decode_block(blocks.encode_block(row)) == row
    assert blocks.decode_unblock(blocks.encode_unblock(blocks.UnblockRow(H, 1))) == blocks.UnblockRow(H, 1)
    assert blocks.decode_since(blocks.encode_since(blocks.SinceRow(H, 42))) == blocks.SinceRow(H, 42)


def test_role_rows_round_trip():
    assert roles.decode_role(roles.encode_role(roles.RoleRow(ADMIN, H))) == roles.RoleRow(ADMIN, H)


def test_context_keys_name_their_context():
    assert roles.context_of_key(roles.context_key("dev")) == "dev"
    assert actions.context_of_key(actions.context_key("dev")) == "dev"


def test_the_store_reads_rows_the_views_wrote(tmp_path):
    with Store(tmp_path / "s", now=lambda: NOW, local_user=URSULA.public_key) as s:
        b = block(URSULA, XU, NOW - 5, drop=1, notify=1)[0]
        r = role(URSULA, ALEPH, ADMIN, NOW - 4)[0]
        s.ingest_many([text(XU, NOW - 10, "general", "x")[0], b, r])
        row = blocks.decode_block(s.db.get(blocks.blocked_key(XU.public_key)))
        assert s.blocks() == {XU.public_key: {"by": row.by, "drop": 1, "notify": 1}}
        assert row.timestamp == NOW - 5
        assert s.roles()[ALEPH.public_key] == "admin"


def _library_files():
    for folder in ("cablestore", "rebuild", "recovery"):
        if (ROOT / folder).is_dir():
            yield from (ROOT / folder).rglob("*.py")


def test_no_sub_key_is_spelled_outside_views_and_the_keyspace():
    bad = []
    for path in _library_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("cablestore/keyspace/"):
            continue
        bad += [f"{rel}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1) if 'PREFIX + b"' in line]
    assert bad == []


def test_the_compiled_twins_are_bound_to_the_views_sub_keys():
    assert native is not None, "the suite runs the compiled hot path (.ci/run checks it is built)"
    assert native.bound_subkeys() == SUBKEYS


def test_the_compiled_source_spells_no_sub_key():
    """Every one-letter bytes literal of the compiled entries/groups is gone: they come from views.SUBKEYS."""
    source = (ROOT / "cablestore" / "_speedups.pyx").read_text()
    body = source[source.index("def entries(ip):") : source.index("def filter_set")]
    assert re.findall(r'\bb"[a-z]"', body) == []
