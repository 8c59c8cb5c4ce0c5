"""Each view encodes and decodes its own rows: typed rows round-trip, no reader outside views/ spells a
view's sub-keys, and the compiled twins take their sub-keys from the views."""

from __future__ import annotations

import re
from pathlib import Path

from cablestore import Store, make_post
from cablestore.compiled import native
from cablestore.keyspace.keys import escape
from cablestore.keyspace.records import Indexed
from cablestore.views import SUBKEYS, actions, author, blocks, channel, chat, links, roles, search, state, user
from cablestore.wire.codec import ADMIN, JOIN, TEXT, TOPIC

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


def test_membership_rows_round_trip():
    row = channel.Membership(True, JOIN, bytes(8) + H)
    assert channel.membership(channel.encode_membership(row)) == row
    assert channel.membership(channel.encode_membership(row._replace(member=False))).member is False
    assert channel.is_member(channel.encode_membership(row))
    assert channel.membership(b"\x01") is None  # too short: a damaged row, never a member


def test_keys_built_by_a_view_are_read_back_by_it():
    ch = escape("dev")
    assert channel.channel_of_key(channel.topic_key(ch))[0] == "dev"
    assert channel.member_of_key(channel.member_key(ch, H), ch) == H
    assert channel.member_key(ch, H) == channel.latest_prefix(channel.member_group(ch, H))
    assert blocks.blocked_user(blocks.blocked_key(H)) == H
    assert user.user_of_key(user.property_key(H, "name")) == H
    assert user.property_name(user.property_key(H, "name"), H) == "name"
    assert user.latest_prefix(H) == user.properties_prefix(H)
    assert state.latest_prefix(ch + H) == state.latest_members_prefix(ch) + H
    assert state.member_prefix("DEV", H) == state.members_prefix(ch) + H
    assert chat.channel_prefix("Dev") == chat.escaped_prefix(ch)


def _indexed(post_type, **fields):
    buf = make_post(XU, post_type, NOW - 1, channel="dev", **fields)[0]
    return Indexed.of(buf)


def test_per_post_rows_decode_to_the_post_they_index():
    ip = _indexed(TEXT, text="deploy the thing")
    (author_key, _), = author.entries(ip)
    assert author.decode_key(author_key) == author.AuthorRow(XU.public_key, TEXT, "dev", NOW - 1, ip.hash)
    assert (author.author_of_key(author_key), author.type_of_key(author_key)) == (XU.public_key, TEXT)
    assert chat.entries(ip) == [(chat.channel_prefix("dev") + ip.mono, b"")]
    postings = [k for k, _ in search.entries(ip)]
    assert sorted(search.term_of_key(k) for k in postings) == sorted(t.encode() for t in ("deploy", "the", "thing"))
    for key in postings:
        term = search.term_of_key(key)
        assert key.startswith(search.postings_prefix(term)) and key < search.past_postings(term)
        assert search.posting_hash(key[len(search.postings_prefix(term)) :]) == ip.hash
    joined = _indexed(JOIN)
    assert state.entries(joined) == [(state.member_prefix("dev", XU.public_key) + joined.mono, b"")]
    topic = _indexed(TOPIC, topic="news")
    (group,) = [g for g in channel.groups(topic) if g[:1] == channel.TOPIC_GROUP]
    assert channel.latest(group, topic) == [(channel.topic_key(escape("dev")), b"news")]


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


# A view's prefix with bytes added on one line (``X.PREFIX + b"t"``, ``X.PREFIX + ch + b"m"``), or a
# one-letter sub-key glued to a key part (``b"m" + escape(channel)``): a key spelled outside its view.
_SPELLED = re.compile(r"""PREFIX\b[^#\n]*\+\s*b["']|\bb["'][a-z]["']\s*\+|\+\s*b["'][a-z]["']""")


def test_no_sub_key_is_spelled_outside_views_and_the_keyspace():
    bad = []
    for path in _library_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("cablestore/keyspace/"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if 'PREFIX + b"' in line or _SPELLED.search(line.split("#", 1)[0]):
                bad.append(f"{rel}:{n}: {line.strip()}")
    assert bad == []


def test_the_spelling_rule_finds_what_it_forbids():
    for line in ('k = X.PREFIX + b"t"', "k = state.PREFIX + ch + b'm'", 'g = b"m" + escape(c)', "k = p + b'l' + h"):
        assert _SPELLED.search(line), line
    assert not _SPELLED.search("k = channel_view.topic_key(ch)")


def test_the_compiled_twins_are_bound_to_the_views_sub_keys():
    assert native is not None, "the suite runs the compiled hot path (.ci/run checks it is built)"
    assert native.bound_subkeys() == SUBKEYS


def _compiled_sources():
    """``_speedups.pyx`` and every ``.pxi`` it includes."""
    pyx = ROOT / "cablestore" / "_speedups.pyx"
    text = pyx.read_text()
    included = re.findall(r'^include "([^"]+)"', text, flags=re.M)
    assert included, "the compiled source includes its .pxi parts"
    return {pyx.name: text, **{name: (pyx.parent / name).read_text() for name in included}}


def test_the_compiled_source_spells_no_sub_key():
    """No bytes literal but ``b""`` in the compiled source and its includes: key prefixes and sub-keys come from
    the views (``bind_views``: their ``PREFIX`` and :data:`views.SUBKEYS`)."""
    found = {name: re.findall(r"""\bb(["'])(.+?)\1""", text) for name, text in _compiled_sources().items()}
    assert {name: lits for name, lits in found.items() if lits} == {}


def test_the_sub_keys_handed_to_the_compiled_twins_are_the_views_own():
    assert SUBKEYS == {
        "state_member": state.MEMBER_ROWS, "state_topic": state.TOPIC_ROWS, "user_posts": user.POST_ROWS,
        "user_latest_hash": user.LATEST_HASH, "linker": links.LINKER, "channel_member": channel.MEMBER_GROUP,
        "channel_topic": channel.TOPIC_GROUP,
    }
    ip = _indexed(JOIN)
    assert [k for k, _ in state.entries(ip)] == [state.members_prefix(escape("dev")) + XU.public_key + ip.mono]
