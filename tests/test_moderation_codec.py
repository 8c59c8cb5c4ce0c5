"""Moderation posts (types 6-9) and the moderation state request (message 8): byte-exact with cable.js 0.2.1, strict on input.

The vectors in tests/data/cable-js-0.2.1-moderation.json were written by cable.js 0.2.1's own encoders (see
tests/data/README.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cablestore import decode_post, encode_post, make_post, post_hash, verify_post
from cablestore.errors import CableError, LimitError, PostFieldError, TrailingBytesError, TruncatedError, Utf8Error
from cablestore.wire import decoding, messages
from cablestore.wire.codec import BLOCK, MODERATION, ROLE, UNBLOCK, Post
from cablestore.wire.fields import encode_str, encode_varint

from .conftest import keypair

VECTORS = json.loads((Path(__file__).parent / "data" / "cable-js-0.2.1-moderation.json").read_text())
POSTS = [k for k in VECTORS if not k.endswith(" binary") and "request" not in k]
MESSAGES = [k for k in VECTORS if not k.endswith(" binary") and "request" in k]
FIELDS = ("reason", "privacy", "channel", "role", "action", "drop", "notify", "undrop")


def test_every_moderation_post_type_is_covered():
    assert {VECTORS[k]["post_type"] for k in POSTS} == {6, 7, 8, 9}
    assert {VECTORS[k]["action"] for k in POSTS if VECTORS[k]["post_type"] == 7} == set(range(8))
    assert len(POSTS) == 21 and len(MESSAGES) == 2


@pytest.mark.parametrize("name", POSTS)
def test_vector_decodes_to_its_fields_and_reencodes_byte_exact(name):
    want, buf = VECTORS[name], bytes.fromhex(VECTORS[name + " binary"])
    post = decode_post(buf)
    assert post.post_type == want["post_type"] and post.timestamp == want["timestamp"]
    assert post.public_key.hex() == want["public_key"] and post.signature.hex() == want["signature"]
    assert [h.hex() for h in post.links] == want["links"]
    for field in FIELDS:
        if field in want:
            assert getattr(post, field) == want[field], field
    recipients = [want["recipient"]] if "recipient" in want else want["recipients"]
    assert [r.hex() for r in post.recipients] == recipients
    assert encode_post(post) == buf
    assert verify_post(buf)


@pytest.mark.parametrize("name", POSTS)
def test_vector_is_made_again_by_make_post(name):
    """Signing the same fields with the same key gives cable.js's bytes (Ed25519 is deterministic)."""
    want = VECTORS[name]
    who = next(n for n in ("admin", "mod", "alice", "bob") if _key(n).public_key.hex() == want["public_key"])
    body = {f: want[f] for f in FIELDS if f in want}
    body["recipients"] = [bytes.fromhex(r) for r in ([want["recipient"]] if "recipient" in want else want["recipients"])]
    buf, _ = make_post(_key(who), want["post_type"], want["timestamp"], [bytes.fromhex(h) for h in want["links"]], **body)
    assert buf.hex() == VECTORS[name + " binary"]


def _key(name):
    import hashlib

    from cablestore import Keypair

    return Keypair.from_seed(hashlib.blake2b(f"cablestore moderation vector key {name}".encode(), digest_size=32).digest())


@pytest.mark.parametrize("name", MESSAGES)
def test_moderation_state_request_vectors(name):
    want, wire = VECTORS[name], bytes.fromhex(VECTORS[name + " binary"])
    m = decoding.decode(wire)
    assert isinstance(m, messages.ModerationStateRequest)
    assert (list(m.channels), m.future, m.oldest, m.ttl) == (want["channels"], want["future"], want["oldest"], want["ttl"])
    assert m.req_id.hex() == want["req_id"]
    assert messages.encode(m) == wire


@pytest.mark.parametrize("name", MESSAGES)
def test_moderation_state_request_in_the_draft8_framing(name):
    m = decoding.decode(bytes.fromhex(VECTORS[name + " binary"]))
    draft = messages.ModerationStateRequest(req_id=bytes(8), channels=m.channels, future=m.future, oldest=m.oldest)
    back = decoding.decode(messages.encode(draft, messages.DRAFT8), messages.DRAFT8)
    assert back == draft


# --- strictness: what cable.js 0.2.1 accepts and this codec refuses -------------------------------

ALICE, BOB = keypair("alice"), keypair("bob")


def raw(post_type: int, body: bytes) -> bytes:
    """An unsigned post of ``post_type`` with ``body`` (decoding does not check signatures)."""
    return ALICE.public_key + bytes(64) + b"\x00" + encode_varint(post_type) + encode_varint(1000) + body


def header(reason: str = "", privacy: int = 0) -> bytes:
    return encode_str(reason) + encode_varint(privacy)


def recipients(n: int) -> bytes:
    return encode_varint(n) + b"".join(bytes([i]) * 32 for i in range(n))


def test_a_valid_raw_body_decodes():
    post = decode_post(raw(MODERATION, header("ok") + encode_str("") + recipients(2) + b"\x00"))
    assert post.post_type == MODERATION and post.channel == "" and len(post.recipients) == 2 and post.reason == "ok"


@pytest.mark.parametrize(
    "post_type, body, error",
    [
        (ROLE, header() + encode_str("") + bytes(32) + b"\x03", LimitError),  # role 3
        (ROLE, header() + encode_str("") + bytes(31), TruncatedError),  # short recipient
        (ROLE, header(privacy=2) + encode_str("") + bytes(32) + b"\x00", LimitError),  # privacy 2
        (ROLE, header("x" * 129) + encode_str("") + bytes(32) + b"\x00", LimitError),  # reason over 128 codepoints
        (ROLE, header() + encode_str("") + bytes(32) + b"\x00" + b"\x00", TrailingBytesError),
        (MODERATION, header() + encode_str("") + recipients(1) + b"\x08", LimitError),  # action 8
        (MODERATION, header() + encode_str("") + recipients(0) + b"\x00", LimitError),  # hide user with no one
        (MODERATION, header() + encode_str("") + recipients(17) + b"\x00", LimitError),  # 17 recipients
        (MODERATION, header() + encode_str("general") + recipients(1) + b"\x06", LimitError),  # drop channel with a recipient
        (MODERATION, header() + encode_str("") + recipients(0) + b"\x06", LimitError),  # drop channel naming none
        (MODERATION, header() + encode_str("c" * 65) + recipients(1) + b"\x00", LimitError),  # channel over 64 codepoints
        (BLOCK, header() + recipients(0) + b"\x00\x00", LimitError),
        (BLOCK, header() + recipients(1) + b"\x02\x00", LimitError),  # drop 2
        (BLOCK, header() + recipients(1) + b"\x00\x02", LimitError),  # notify 2
        (BLOCK, header() + recipients(1) + b"\x00", TruncatedError),
        (UNBLOCK, header() + recipients(1) + b"\x02", LimitError),  # undrop 2
        (UNBLOCK, header() + recipients(17) + b"\x01", LimitError),
        (UNBLOCK, encode_varint(2) + b"\xff\xfe" + b"\x00" + recipients(1) + b"\x01", Utf8Error),
    ],
)
def test_malformed_moderation_posts_are_refused(post_type, body, error):
    with pytest.raises(error):
        decode_post(raw(post_type, body))


def test_a_reason_of_128_multibyte_codepoints_is_accepted():
    """The limit is in codepoints (moderation.md §5.1.1); cable.js limits bytes."""
    post = decode_post(raw(ROLE, header("é" * 128) + encode_str("") + bytes(32) + b"\x00"))
    assert len(post.reason) == 128 and len(post.reason.encode()) == 256


def test_make_post_refuses_wrong_fields():
    with pytest.raises(PostFieldError):
        make_post(ALICE, ROLE, 1, reason="", privacy=0, channel="", recipients=[BOB.public_key])  # no role
    with pytest.raises(PostFieldError):
        make_post(ALICE, BLOCK, 1, reason="", privacy=0, recipients=[BOB.public_key], drop=0, notify=0, text="x")
    with pytest.raises(LimitError):
        make_post(ALICE, ROLE, 1, reason="", privacy=0, channel="", recipients=[BOB.public_key, ALICE.public_key], role=0)
    with pytest.raises(CableError):
        make_post(ALICE, BLOCK, 1, reason="", privacy=0, recipients=[b"short"], drop=0, notify=0)


def test_moderation_posts_have_their_own_hash_and_repr():
    buf, post = make_post(ALICE, UNBLOCK, 5, reason="sorry", privacy=0, recipients=[BOB.public_key], undrop=1)
    assert post_hash(buf) != post_hash(buf[:-1] + b"\x00")
    assert "post/unblock" in repr(post) and "undrop=1" in repr(post)
    assert isinstance(decode_post(buf), Post)
