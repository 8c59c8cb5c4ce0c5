"""Codec tests: Cable 1.0 post encoding/decoding, hashing and signatures.

Data comes only from ``tests/data``:

* ``cable-js-0.2.1.json``: the cable.js 0.2.1 / Rust wire vectors.
* ``cablejs-0.2.1-s7-2000/``: 2,000 posts written and signed by cable.js 0.2.1.

Hand-built posts below use an all-zero public key and signature: decoding does
not check signatures, so these exercise the parser alone.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import struct
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cablestore import (
    DELETE,
    INFO,
    JOIN,
    LEAVE,
    POST_TYPE_NAMES,
    TEXT,
    TOPIC,
    CableError,
    Keypair,
    Post,
    decode_post,
    encode_post,
    make_post,
    post_hash,
    sign_post,
    verify_post,
)
from cablestore.errors import (
    DecodeError,
    LimitError,
    TrailingBytesError,
    TruncatedError,
    UnknownPostTypeError,
    Utf8Error,
    VarintError,
)
from cablestore.wire import codec
from cablestore.wire.codec import encode_varint, read_varint

DATA = Path(__file__).parent / "data"
VECTORS_FILE = DATA / "cable-js-0.2.1.json"
FIXTURE_DIR = DATA / "cablejs-0.2.1-s7-2000"

U64_MAX = 2**64 - 1
EMOJI = "\U0001F600"  # 1 codepoint, 4 UTF-8 bytes
E_ACUTE = "\u00e9"  # 1 codepoint, 2 UTF-8 bytes

# Moderate example counts keep the whole module well under ~30 s.  No example
# database: running the tests must not write anything into the repository.
FAST = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FUZZ = settings(FAST, max_examples=300)

VECTOR_NAMES = ["text post", "delete post", "info post", "topic post", "join post", "leave post"]


# --- helpers -----------------------------------------------------------------


@functools.cache
def vectors() -> dict:
    return json.loads(VECTORS_FILE.read_text(encoding="utf-8"))


def vector_bytes(name: str) -> bytes:
    return bytes.fromhex(vectors()[name + " binary"])


@functools.cache
def fixture_records() -> tuple[bytes, ...]:
    data = (FIXTURE_DIR / "posts.bin").read_bytes()
    records = []
    pos = 0
    while pos < len(data):
        assert pos + 4 <= len(data), "posts.bin ends inside a length prefix"
        (n,) = struct.unpack_from(">I", data, pos)
        pos += 4
        assert pos + n <= len(data), "posts.bin ends inside a record"
        records.append(data[pos : pos + n])
        pos += n
    assert pos == len(data)
    return tuple(records)


@functools.cache
def fixture_rows() -> tuple[dict, ...]:
    with (FIXTURE_DIR / "posts.jsonl").open(encoding="utf-8") as fh:
        return tuple(json.loads(line) for line in fh if line.strip())


def vstr(value: str | bytes) -> bytes:
    """A varint length-prefixed string (bytes are used as-is, for bad UTF-8)."""
    raw = value.encode("utf-8") if isinstance(value, str) else value
    return encode_varint(len(raw)) + raw


def raw_post(post_type: int | bytes, body: bytes = b"", *, links: bytes = b"\x00", timestamp: bytes = b"\x00") -> bytes:
    """Unsigned post bytes: zero key and signature, then the given fields verbatim."""
    pt = encode_varint(post_type) if isinstance(post_type, int) else post_type
    return bytes(32) + bytes(64) + links + pt + timestamp + body


def info_body(*pairs: tuple[str | bytes, str | bytes], terminator: bool = True) -> bytes:
    out = b"".join(vstr(k) + vstr(v) for k, v in pairs)
    return out + (b"\x00" if terminator else b"")


KP = Keypair.from_seed(bytes(range(32)))
KP2 = Keypair.from_seed(b"\x42" * 32)


def decodes_or_cable_error(buf: bytes) -> Post | None:
    """decode_post must return a Post or raise a CableError; nothing else may escape.

    A successful decode must re-encode to exactly the input (the codec's
    strictness promise), so the hash and signature stay meaningful.
    """
    try:
        post = decode_post(buf)
    except CableError:
        return None
    assert isinstance(post, Post)
    assert encode_post(post) == bytes(buf)
    return post


def raises_with_label(error: type[Exception], buf: bytes, label: str) -> None:
    """Assert decode_post(buf) raises exactly ``error`` (or a subclass); name the case if not."""
    try:
        post = decode_post(buf)
    except error:
        return
    except Exception as exc:  # noqa: BLE001 - reported as a failure below
        pytest.fail(f"{label}: expected {error.__name__}, got {type(exc).__name__}: {exc}")
    pytest.fail(f"{label}: expected {error.__name__}, decoded {post!r}")


# --- 1. wire vectors -----------------------------------------------------------


def test_vector_file_has_the_six_post_vectors():
    v = vectors()
    for name in VECTOR_NAMES:
        assert name in v and name + " binary" in v
        assert v[name]["post_type"] == VECTOR_NAMES.index(name)


@pytest.mark.parametrize("name", VECTOR_NAMES)
def test_vector_decodes_to_listed_fields(name):
    expected = vectors()[name]
    post = decode_post(vector_bytes(name))
    assert post.public_key.hex() == expected["public_key"]
    assert post.signature.hex() == expected["signature"]
    assert [link.hex() for link in post.links] == expected["links"]
    assert isinstance(post.links, tuple)
    assert post.post_type == expected["post_type"]
    assert post.type_name == POST_TYPE_NAMES[expected["post_type"]]
    assert post.timestamp == expected["timestamp"]
    if post.post_type in (TEXT, TOPIC, JOIN, LEAVE):
        assert post.channel == expected["channel"]
    else:
        assert post.channel is None
    assert post.text == expected.get("text")
    assert post.topic == expected.get("topic")
    if post.post_type == DELETE:
        assert isinstance(post.hashes, tuple)
        assert [h.hex() for h in post.hashes] == expected["hashes"]
    else:
        assert post.hashes is None
    if post.post_type == INFO:
        assert post.info == tuple((kv["key"], kv["val"]) for kv in expected["info"])
        assert post.info_value("name") == "ripple"
    else:
        assert post.info is None


@pytest.mark.parametrize("name", VECTOR_NAMES)
def test_vector_signature_verifies(name):
    assert verify_post(vector_bytes(name)) is True


@pytest.mark.parametrize("name", VECTOR_NAMES)
def test_vector_reencodes_byte_exact(name):
    buf = vector_bytes(name)
    assert encode_post(decode_post(buf)) == buf
    # bytearray and memoryview inputs decode to the same post.
    assert decode_post(bytearray(buf)) == decode_post(buf)
    assert decode_post(memoryview(buf)) == decode_post(buf)


@pytest.mark.parametrize("name", VECTOR_NAMES)
def test_vector_hash_is_blake2b_256(name):
    buf = vector_bytes(name)
    h = post_hash(buf)
    assert isinstance(h, bytes) and len(h) == 32
    assert h == hashlib.blake2b(buf, digest_size=32).digest()
    # BLAKE2b-256 is not BLAKE2b-512 truncated: the digest size is in the parameter block.
    assert h != hashlib.blake2b(buf).digest()[:32]


def test_post_hash_known_values():
    assert post_hash(vector_bytes("text post")).hex() == (
        "01ee4faab63479e102e05f120423628631936f843c6458da14d58f1c08be090e"
    )
    assert post_hash(b"") == hashlib.blake2b(b"", digest_size=32).digest()


@pytest.mark.parametrize("name", VECTOR_NAMES)
def test_vector_tampered_signature_or_key_does_not_verify(name):
    buf = vector_bytes(name)
    # Another vector's signature over this vector's body.
    donor = vector_bytes("join post" if name != "join post" else "leave post")
    assert verify_post(buf[:32] + donor[32:96] + buf[96:]) is False
    assert verify_post(KP.public_key + buf[32:]) is False
    assert verify_post(buf[:96]) is False  # empty body
    assert verify_post(buf[:95]) is False  # shorter than a header
    assert verify_post(b"") is False


def test_post_response_vector_embeds_text_post():
    # The "post response" message carries the "text post" bytes verbatim.
    v = vectors()
    assert v["post response"]["posts"] == [v["text post binary"]]
    assert v["text post binary"] in v["post response binary"]


# --- 2. the cable.js 2,000-post fixture -------------------------------------------


def test_fixture_framing_and_counts():
    records = fixture_records()
    rows = fixture_rows()
    assert len(records) == 2000
    assert len(rows) == 2000
    assert [r["idx"] for r in rows] == list(range(2000))
    summary = json.loads((FIXTURE_DIR / "summary.json").read_text(encoding="utf-8"))
    counts: dict[str, int] = {}
    for buf in records:
        t = decode_post(buf).type_name
        counts[t] = counts.get(t, 0) + 1
    assert counts == summary["byType"]


def test_fixture_posts_decode_verify_reencode_and_hash():
    for buf, row in zip(fixture_records(), fixture_rows(), strict=True):
        post = decode_post(buf)
        assert verify_post(buf) is True, row["idx"]
        assert encode_post(post) == buf, row["idx"]
        assert post_hash(buf).hex() == row["hash"], row["idx"]


def test_fixture_fields_match_jsonl():
    channels = set()
    for buf, row in zip(fixture_records(), fixture_rows(), strict=True):
        post = decode_post(buf)
        idx = row["idx"]
        assert post.post_type == row["post_type"], idx
        assert post.type_name == row["type"], idx
        assert post.public_key.hex() == row["author"], idx
        assert post.timestamp == row["timestamp"], idx
        assert [link.hex() for link in post.links] == row["links"], idx
        assert post.channel == row.get("channel"), idx
        assert post.text == row.get("text"), idx
        assert post.topic == row.get("topic"), idx
        if "deletes" in row:
            assert [h.hex() for h in post.hashes] == row["deletes"], idx
        else:
            assert post.hashes is None, idx
        if "name" in row:
            assert post.info == (("name", row["name"]),), idx
            assert post.info_value("name") == row["name"], idx
        else:
            assert post.info is None, idx
        if post.channel is not None:
            channels.add(post.channel)
    # The edge-case channels survive decoding unchanged (no case folding).
    assert {"general", "Dev-Talk", "dev-talk", "\u00fcn\u00efcode-\u2615", "news", "news!2024"} <= channels


def test_fixture_deletes_reference_fixture_hashes():
    # Each deleted hash is the BLAKE2b-256 of an earlier fixture post by the same
    # author, and the jsonl names this delete as its deleter.
    rows = fixture_rows()
    records = fixture_records()
    position = {post_hash(buf): i for i, buf in enumerate(records)}
    deletes = 0
    for i, (buf, row) in enumerate(zip(records, rows, strict=True)):
        post = decode_post(buf)
        if post.post_type != DELETE:
            continue
        deletes += 1
        assert len(post.hashes) >= 1
        for h in post.hashes:
            j = position[h]
            assert j < i
            target = decode_post(records[j])
            assert target.public_key == post.public_key
            assert rows[j]["deleted_by"] == row["hash"]
    assert deletes == 168


# --- 3. round trips of generated posts --------------------------------------------

# Any codepoint except surrogates (which UTF-8 cannot encode).
valid_chars = st.characters(exclude_categories=("Cs",))
channels = st.one_of(
    st.sampled_from(["general", "Dev-Talk", "news!2024", "\u00fcn\u00efcode-\u2615", "!", EMOJI * 64, "a" * 64]),
    st.text(alphabet=valid_chars, min_size=1, max_size=64),
)
texts = st.one_of(
    st.text(alphabet=valid_chars, max_size=300),
    st.sampled_from(["", "a" * 4096, EMOJI * 1024, E_ACUTE * 2048]),
)
topics = st.one_of(
    st.text(alphabet=valid_chars, max_size=200),
    st.sampled_from(["", EMOJI * 512, "t" * 512]),
)
hashes32 = st.binary(min_size=32, max_size=32)
links_st = st.lists(hashes32, max_size=4).map(tuple)
timestamps = st.one_of(
    st.integers(min_value=0, max_value=U64_MAX),
    st.sampled_from([0, 127, 128, 2**32, 2**63 - 1, 2**63, U64_MAX]),
)
info_pair = st.one_of(
    st.tuples(st.just("name"), st.text(alphabet=valid_chars, min_size=1, max_size=32)),
    st.tuples(
        st.text(alphabet=valid_chars, min_size=1, max_size=128).filter(
            lambda k: k != "name"
        ),
        st.text(alphabet=valid_chars, max_size=64),
    ),
    st.sampled_from([("accept-role", "\x00"), ("accept-role", "\x01"), ("k" * 128, ""), (EMOJI * 128, E_ACUTE * 2048), ("name", EMOJI * 32)]),
)
infos = st.lists(info_pair, max_size=4).map(tuple)
keypairs = st.binary(min_size=32, max_size=32).map(Keypair.from_seed)


@st.composite
def post_bodies(draw):
    """(post_type, body kwargs) for a valid post of any of the six types."""
    t = draw(st.sampled_from([TEXT, DELETE, INFO, TOPIC, JOIN, LEAVE]))
    if t == TEXT:
        return t, {"channel": draw(channels), "text": draw(texts)}
    if t == DELETE:
        return t, {"hashes": tuple(draw(st.lists(hashes32, min_size=1, max_size=5)))}
    if t == INFO:
        return t, {"info": draw(infos)}
    if t == TOPIC:
        return t, {"channel": draw(channels), "topic": draw(topics)}
    return t, {"channel": draw(channels)}


@st.composite
def signed_posts(draw):
    kp = draw(keypairs)
    t, body = draw(post_bodies())
    buf, post = make_post(kp, t, draw(timestamps), links=draw(links_st), **body)
    return kp, t, body, buf, post


@FAST
@given(signed_posts())
def test_roundtrip_make_post(sample):
    kp, t, body, buf, post = sample
    assert decode_post(buf) == post
    assert encode_post(post) == buf
    assert verify_post(buf) is True
    assert post.public_key == kp.public_key
    assert post.post_type == t
    for field, value in body.items():
        assert getattr(post, field) == value
    assert post_hash(buf) == hashlib.blake2b(buf, digest_size=32).digest()


@FAST
@given(keypairs, post_bodies(), timestamps, links_st)
def test_roundtrip_sign_post(kp, type_and_body, ts, links):
    t, body = type_and_body
    draft = Post(bytes(32), bytes(64), links, t, ts, **body)
    buf = sign_post(draft, kp)
    decoded = decode_post(buf)
    assert decoded == dataclasses.replace(draft, public_key=kp.public_key, signature=buf[32:96])
    assert encode_post(decoded) == buf
    assert verify_post(buf) is True
    # Ed25519 is deterministic: signing again gives the same bytes.
    assert sign_post(draft, kp) == buf
    # Re-signing with another key changes the author and still verifies.
    other = sign_post(decoded, KP2)
    assert other[:32] == KP2.public_key and other[96:] == buf[96:]
    assert verify_post(other) is True


@FAST
@given(signed_posts(), st.data())
def test_single_byte_flip_breaks_signed_post(sample, data):
    _, _, _, buf, _ = sample
    i = data.draw(st.integers(min_value=0, max_value=len(buf) - 1), label="index")
    x = data.draw(st.integers(min_value=1, max_value=255), label="xor")
    mutated = bytearray(buf)
    mutated[i] ^= x
    mutated = bytes(mutated)
    # The signature covers every byte, so a flip anywhere must fail verification
    # (this is stronger than "verify fails or decoding raises").
    assert verify_post(mutated) is False
    decodes_or_cable_error(mutated)


def test_single_byte_flip_every_position_of_vectors():
    # Exhaustive over positions for the six vectors (one flip pattern per byte).
    for name in VECTOR_NAMES:
        buf = vector_bytes(name)
        for i in range(len(buf)):
            for x in (0x01, 0x80):
                mutated = bytearray(buf)
                mutated[i] ^= x
                mutated = bytes(mutated)
                assert verify_post(mutated) is False, (name, i, x)
                decodes_or_cable_error(mutated)


ED25519_L = 2**252 + 27742317777372353535851937790883648493  # the group order


@pytest.mark.parametrize("name", VECTOR_NAMES)
def test_non_canonical_signature_refused(name):
    # S + L verifies under a lax verifier, and would give the same signed
    # content a second hash.  The signature must be refused.
    buf = vector_bytes(name)
    s_value = int.from_bytes(buf[64:96], "little")
    assert s_value < ED25519_L
    malleated = buf[:64] + (s_value + ED25519_L).to_bytes(32, "little") + buf[96:]
    assert verify_post(malleated) is False
    assert decode_post(malleated).signature != decode_post(buf).signature


def test_small_order_key_and_signature_refused():
    # Identity public key with R = identity, S = 0 "verifies" any message under
    # cofactorless verification that does not reject small-order points.
    identity = b"\x01" + bytes(31)
    forged = identity + identity + bytes(32) + raw_post(JOIN, vstr("general"))[96:]
    assert decode_post(forged).channel == "general"
    assert verify_post(forged) is False


def test_keypair_from_seed_matches_rfc8032_test_1():
    seed = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    kp = Keypair.from_seed(seed)
    assert kp.public_key.hex() == "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    assert kp.sign(b"").hex() == (
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
    )
    assert Keypair.from_seed(seed).public_key == kp.public_key
    assert Keypair.from_seed(b"\x01" * 32).public_key != kp.public_key


# --- 4. validation rules and their exact boundaries --------------------------------


def test_shorter_than_header_is_truncated():
    for n in (0, 1, 32, 95):
        with pytest.raises(TruncatedError):
            decode_post(bytes(n))
    # 96 bytes: the header's fixed part only, no links count.
    with pytest.raises(TruncatedError):
        decode_post(bytes(96))


@pytest.mark.parametrize("name", VECTOR_NAMES)
def test_every_strict_prefix_of_a_vector_is_truncated(name):
    buf = vector_bytes(name)
    for n in range(len(buf)):
        with pytest.raises(TruncatedError):
            decode_post(buf[:n])


@pytest.mark.parametrize("name", VECTOR_NAMES)
@pytest.mark.parametrize("extra", [b"\x00", b"\x01", b"\xff" * 7])
def test_trailing_bytes_refused(name, extra):
    with pytest.raises(TrailingBytesError):
        decode_post(vector_bytes(name) + extra)


def test_trailing_bytes_after_info_terminator():
    with pytest.raises(TrailingBytesError):
        decode_post(raw_post(INFO, info_body(("name", "x")) + b"\x00"))


@pytest.mark.parametrize("post_type", [10, 11, 127, 128, 255, 256, 2**32, U64_MAX])
def test_unknown_post_type_refused(post_type):
    with pytest.raises(UnknownPostTypeError):
        decode_post(raw_post(post_type, vstr("general")))


def test_unknown_post_type_256_wire_bytes():
    # 256 is the two-byte varint 0x80 0x02, whose low 7 bits are 0 (TEXT).
    assert encode_varint(256) == b"\x80\x02"
    with pytest.raises(UnknownPostTypeError):
        decode_post(raw_post(b"\x80\x02", vstr("general") + vstr("hi")))


def test_encode_unknown_post_type_refused():
    with pytest.raises(UnknownPostTypeError):
        encode_post(Post(bytes(32), bytes(64), (), 10, 0, channel="general"))


BAD_UTF8 = [
    b"\xff",  # never valid
    b"\xc3",  # truncated two-byte sequence
    b"\xc0\xaf",  # overlong '/'
    b"\xed\xa0\x80",  # UTF-16 surrogate (CESU-8)
    b"\xf4\x90\x80\x80",  # above U+10FFFF
    b"ok\x80",  # stray continuation byte
]


@pytest.mark.parametrize("bad", BAD_UTF8)
def test_invalid_utf8_refused_in_every_string_field(bad):
    cases = {
        "text channel": raw_post(TEXT, vstr(bad) + vstr("hi")),
        "text": raw_post(TEXT, vstr("general") + vstr(bad)),
        "topic channel": raw_post(TOPIC, vstr(bad) + vstr("t")),
        "topic": raw_post(TOPIC, vstr("general") + vstr(bad)),
        "join channel": raw_post(JOIN, vstr(bad)),
        "leave channel": raw_post(LEAVE, vstr(bad)),
        "info key": raw_post(INFO, info_body((bad, "v"))),
        "info value": raw_post(INFO, info_body(("k", bad))),
        "name value": raw_post(INFO, info_body(("name", bad))),
    }
    for what, buf in cases.items():
        raises_with_label(Utf8Error, buf, what)


def test_empty_delete_refused():
    with pytest.raises(LimitError):
        decode_post(raw_post(DELETE, b"\x00"))
    with pytest.raises(LimitError):
        encode_post(Post(bytes(32), bytes(64), (), DELETE, 0, hashes=()))
    with pytest.raises(LimitError):
        make_post(KP, DELETE, 0, hashes=())


def test_delete_one_hash_ok_and_short_hash_truncated():
    h = bytes(range(32))
    post = decode_post(raw_post(DELETE, b"\x01" + h))
    assert post.hashes == (h,)
    with pytest.raises(TruncatedError):
        decode_post(raw_post(DELETE, b"\x01" + h[:31]))
    with pytest.raises(TruncatedError):
        decode_post(raw_post(DELETE, b"\x02" + h))


def test_delete_missing_count_truncated():
    with pytest.raises(TruncatedError):
        decode_post(raw_post(DELETE, b""))


def test_links_count_beyond_buffer_truncated():
    with pytest.raises(TruncatedError):
        decode_post(raw_post(JOIN, vstr("general"), links=b"\x01" + bytes(31)))
    with pytest.raises(TruncatedError):
        decode_post(raw_post(JOIN, vstr("general"), links=b"\x02" + bytes(32)))


HUGE = 2**60

HUGE_DECLARATIONS = {
    "links count": raw_post(TEXT, vstr("general") + vstr("hi"), links=encode_varint(HUGE)),
    "deletion count": raw_post(DELETE, encode_varint(HUGE) + bytes(32)),
    "text channel length": raw_post(TEXT, encode_varint(HUGE) + b"abc"),
    "text length": raw_post(TEXT, vstr("general") + encode_varint(HUGE) + b"abc"),
    "topic length": raw_post(TOPIC, vstr("general") + encode_varint(HUGE) + b"abc"),
    "join channel length": raw_post(JOIN, encode_varint(HUGE) + b"abc"),
    "leave channel length": raw_post(LEAVE, encode_varint(HUGE) + b"abc"),
    "info key length": raw_post(INFO, encode_varint(HUGE) + b"abc"),
    "info value length": raw_post(INFO, vstr("name") + encode_varint(HUGE) + b"abc"),
    "max u64 links count": raw_post(JOIN, vstr("general"), links=encode_varint(U64_MAX)),
    "max u64 deletion count": raw_post(DELETE, encode_varint(U64_MAX)),
    "max u64 string length": raw_post(JOIN, encode_varint(U64_MAX) + b"x"),
}


@pytest.mark.parametrize("what", sorted(HUGE_DECLARATIONS))
def test_huge_declared_length_refused_before_allocation(what):
    buf = HUGE_DECLARATIONS[what]
    assert len(buf) < 200
    tracemalloc.start()
    try:
        t0 = time.perf_counter()
        with pytest.raises(TruncatedError):
            decode_post(buf)
        elapsed = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 0.5
    assert peak < 1 << 20  # nothing proportional to the declared length


# Varint errors inside a post, in each varint position.


@pytest.mark.parametrize(
    "bad_varint, error",
    [
        (b"\x80\x00", VarintError),  # non-minimal zero
        (b"\x81\x00", VarintError),  # non-minimal one
        (b"\xff" * 9 + b"\x02", VarintError),  # 2**64: overflows u64
        (b"\xff" * 9 + b"\x7f", VarintError),  # overflows u64
        (b"\x80" * 10 + b"\x01", VarintError),  # 11 bytes
        (b"\xff" * 10 + b"\x01", VarintError),  # 11 bytes
    ],
)
def test_bad_varints_in_every_position(bad_varint, error):
    h = bytes(32)
    cases = {
        "links count": raw_post(JOIN, vstr("general"), links=bad_varint),
        "post type": raw_post(bad_varint, vstr("general")),
        "timestamp": raw_post(JOIN, vstr("general"), timestamp=bad_varint),
        "channel length": raw_post(JOIN, bad_varint + b"general"),
        "text length": raw_post(TEXT, vstr("general") + bad_varint + b"hi"),
        "topic length": raw_post(TOPIC, vstr("general") + bad_varint + b"hi"),
        "deletion count": raw_post(DELETE, bad_varint + h),
        "info key length": raw_post(INFO, bad_varint + b"name" + vstr("x") + b"\x00"),
        "info value length": raw_post(INFO, vstr("name") + bad_varint + b"x" + b"\x00"),
    }
    for what, buf in cases.items():
        raises_with_label(error, buf, what)


def test_non_minimal_post_type_is_not_read_as_text():
    # 0x80 0x00 would be TEXT (0) to a lax LEB128 reader.
    with pytest.raises(VarintError):
        decode_post(raw_post(b"\x80\x00", vstr("general") + vstr("hi")))


def test_timestamp_full_u64_range():
    for ts in (0, 1, 127, 128, 2**32, 2**63, U64_MAX):
        post = decode_post(raw_post(JOIN, vstr("general"), timestamp=encode_varint(ts)))
        assert post.timestamp == ts
    assert encode_varint(U64_MAX) == b"\xff" * 9 + b"\x01"
    with pytest.raises(LimitError):
        encode_post(Post(bytes(32), bytes(64), (), JOIN, 2**64, channel="general"))


# Text: <= 4096 bytes (bytes, not codepoints).


@pytest.mark.parametrize("text", ["a" * 4096, EMOJI * 1024, E_ACUTE * 2048, "", "\x00"])
def test_text_at_limit_ok(text):
    buf, post = make_post(KP, TEXT, 1, channel="general", text=text)
    assert post.text == text
    assert decode_post(buf).text == text
    assert verify_post(buf)


@pytest.mark.parametrize("text", ["a" * 4097, E_ACUTE * 2048 + "a", EMOJI * 1024 + "a", "a" * 10_000])
def test_text_over_limit_refused(text):
    assert len(text.encode()) > 4096
    with pytest.raises(LimitError):
        decode_post(raw_post(TEXT, vstr("general") + vstr(text)))
    with pytest.raises(LimitError):
        make_post(KP, TEXT, 1, channel="general", text=text)


def test_text_limit_counts_bytes_not_codepoints():
    # 2049 codepoints but 4097 bytes: refused.  1024 codepoints / 4096 bytes: accepted.
    text = E_ACUTE * 2048 + "a"
    assert len(text) == 2049 and len(text.encode()) == 4097
    with pytest.raises(LimitError):
        decode_post(raw_post(TEXT, vstr("general") + vstr(text)))


# Channel: 1-64 codepoints, in every post type that has one.


def channel_post(post_type: int, channel: str | bytes) -> bytes:
    if post_type == TEXT:
        return raw_post(TEXT, vstr(channel) + vstr("hi"))
    if post_type == TOPIC:
        return raw_post(TOPIC, vstr(channel) + vstr("topic"))
    return raw_post(post_type, vstr(channel))


def channel_body(post_type: int, channel: str) -> dict:
    if post_type == TEXT:
        return {"channel": channel, "text": "hi"}
    if post_type == TOPIC:
        return {"channel": channel, "topic": "topic"}
    return {"channel": channel}


CHANNEL_TYPES = [TEXT, TOPIC, JOIN, LEAVE]


@pytest.mark.parametrize("post_type", CHANNEL_TYPES)
@pytest.mark.parametrize("channel", [EMOJI * 64, "a" * 64, "x", "!", "news!2024", EMOJI, E_ACUTE * 64])
def test_channel_within_limits_ok(post_type, channel):
    post = decode_post(channel_post(post_type, channel))
    assert post.channel == channel
    buf, made = make_post(KP, post_type, 5, **channel_body(post_type, channel))
    assert made.channel == channel and verify_post(buf)


def test_emoji_channel_has_more_bytes_than_codepoints():
    assert len(EMOJI * 64) == 64 and len((EMOJI * 64).encode()) == 256


@pytest.mark.parametrize("post_type", CHANNEL_TYPES)
@pytest.mark.parametrize("channel", [EMOJI * 65, "a" * 65, ""])
def test_channel_outside_limits_refused(post_type, channel):
    with pytest.raises(LimitError):
        decode_post(channel_post(post_type, channel))
    with pytest.raises(LimitError):
        make_post(KP, post_type, 5, **channel_body(post_type, channel))


# Topic: <= 512 codepoints; empty is allowed.


@pytest.mark.parametrize("topic", [EMOJI * 512, "t" * 512, ""])
def test_topic_within_limit_ok(topic):
    assert decode_post(raw_post(TOPIC, vstr("general") + vstr(topic))).topic == topic
    buf, post = make_post(KP, TOPIC, 5, channel="general", topic=topic)
    assert post.topic == topic and verify_post(buf)


@pytest.mark.parametrize("topic", [EMOJI * 513, "t" * 513])
def test_topic_over_limit_refused(topic):
    with pytest.raises(LimitError):
        decode_post(raw_post(TOPIC, vstr("general") + vstr(topic)))
    with pytest.raises(LimitError):
        make_post(KP, TOPIC, 5, channel="general", topic=topic)


# post/info: key 1-128 codepoints, value <= 4096 bytes, name value 1-32 codepoints.


@pytest.mark.parametrize(
    "pairs",
    [
        (("name", "ripple"),),
        ((EMOJI * 128, "v"),),
        (("k" * 128, ""),),
        (("note", "v" * 4096),),
        (("note", EMOJI * 1024),),
        (("name", EMOJI * 32),),
        (("name", "n" * 32),),
        (("name", "x"),),
        (("name", "a"), ("accept-role", "\x00"), ("name", "b")),
        (),
    ],
)
def test_info_within_limits_ok(pairs):
    post = decode_post(raw_post(INFO, info_body(*pairs)))
    assert post.info == pairs
    buf, made = make_post(KP, INFO, 5, info=pairs)
    assert made.info == pairs and verify_post(buf)


def test_info_value_returns_last_repeated_key():
    post = decode_post(raw_post(INFO, info_body(("name", "a"), ("other", "z"), ("name", "b"))))
    assert post.info_value("name") == "b"
    assert post.info_value("missing") is None


@pytest.mark.parametrize(
    "pairs",
    [
        ((EMOJI * 129, "v"),),  # key 129 codepoints
        (("k" * 129, "v"),),
        (("note", "v" * 4097),),  # value 4097 bytes
        (("note", E_ACUTE * 2048 + "a"),),  # 2049 codepoints, 4097 bytes
        (("name", EMOJI * 33),),  # name 33 codepoints
        (("name", "n" * 33),),
        (("name", ""),),  # empty name
        (("name", "ok"), ("name", "")),  # the bad pair need not be first
    ],
)
def test_info_outside_limits_refused(pairs):
    with pytest.raises(LimitError):
        decode_post(raw_post(INFO, info_body(*pairs)))
    with pytest.raises(LimitError):
        make_post(KP, INFO, 5, info=pairs)


def test_name_limit_counts_codepoints_not_bytes():
    # 32 four-byte codepoints (128 bytes) is fine; it is codepoints that are limited.
    assert decode_post(raw_post(INFO, info_body(("name", EMOJI * 32)))).info_value("name") == EMOJI * 32


def test_info_without_terminator_truncated():
    with pytest.raises(TruncatedError):
        decode_post(raw_post(INFO, info_body(("name", "ripple"), terminator=False)))
    with pytest.raises(TruncatedError):
        decode_post(raw_post(INFO, b""))


def test_draft8_num_keypairs_info_refused():
    # Spec draft8 form: num_keypairs=1, then "name" / "ripple".  The deployed
    # reader takes the count 0x01 as a key length, so the key is "\x04" and the
    # value length is the varint 0x6e ('n' = 110) which runs past the buffer.
    body = encode_varint(1) + vstr("name") + vstr("ripple")
    assert body == b"\x01\x04name\x06ripple"
    with pytest.raises(DecodeError) as excinfo:
        decode_post(raw_post(INFO, body))
    assert isinstance(excinfo.value, TruncatedError)

    # The same with a trailing zero (draft8 count plus a deployed-style
    # terminator): still misaligned in the same way, so still refused.
    with pytest.raises(DecodeError) as excinfo:
        decode_post(raw_post(INFO, body + b"\x00"))
    assert isinstance(excinfo.value, TruncatedError)

    # The deployed form of the same pair, for contrast, is the info vector's body.
    deployed = raw_post(INFO, info_body(("name", "ripple")))
    assert decode_post(deployed).info == (("name", "ripple"),)
    assert vector_bytes("info post").endswith(info_body(("name", "ripple")))


def test_encode_post_rejects_malformed_fields():
    ok = Post(bytes(32), bytes(64), (), JOIN, 0, channel="general")
    assert decode_post(encode_post(ok)) == ok
    with pytest.raises(LimitError):
        encode_post(dataclasses.replace(ok, public_key=bytes(31)))
    with pytest.raises(LimitError):
        encode_post(dataclasses.replace(ok, signature=bytes(63)))
    with pytest.raises(LimitError):
        encode_post(dataclasses.replace(ok, links=(bytes(31),)))
    with pytest.raises(LimitError):
        encode_post(Post(bytes(32), bytes(64), (), DELETE, 0, hashes=(bytes(33),)))
    with pytest.raises(LimitError):
        encode_post(dataclasses.replace(ok, timestamp=-1))


def test_post_is_frozen():
    post = decode_post(vector_bytes("join post"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        post.channel = "other"  # type: ignore[misc]


# --- 5. decoder robustness -----------------------------------------------------------


@FUZZ
@given(st.binary(max_size=400))
def test_decode_arbitrary_bytes(buf):
    decodes_or_cable_error(buf)


@FUZZ
@given(
    st.binary(min_size=0, max_size=4).map(lambda b: b or b"\x00"),  # links count (+ maybe bytes)
    st.integers(min_value=0, max_value=7),
    st.binary(max_size=10),
    st.binary(max_size=120),
)
def test_decode_arbitrary_bodies_after_a_header(links, post_type, timestamp, body):
    # Random bytes almost never get past the header; this aims at the bodies.
    buf = bytes(96) + links + bytes([post_type]) + (timestamp or b"\x00") + body
    decodes_or_cable_error(buf)


@FUZZ
@given(
    st.sampled_from([TEXT, DELETE, INFO, TOPIC, JOIN, LEAVE]),
    st.lists(
        st.one_of(
            st.binary(max_size=8),
            st.sampled_from([b"\x00", b"\x04name", b"\x01", b"\x80", b"\x20" + bytes(32), b"\xff", b"\xe2\x98\x95"]),
            st.text(max_size=8).map(vstr),
        ),
        max_size=8,
    ),
)
def test_decode_structured_bodies(post_type, chunks):
    post = decodes_or_cable_error(raw_post(post_type, b"".join(chunks)))
    if post is not None:
        assert post.post_type == post_type


MUTATIONS = st.one_of(
    st.tuples(st.just("truncate"), st.integers(min_value=0, max_value=400), st.just(b"")),
    st.tuples(st.just("flip"), st.integers(min_value=0, max_value=400), st.integers(1, 255).map(lambda x: bytes([x]))),
    st.tuples(st.just("insert"), st.integers(min_value=0, max_value=400), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("delete"), st.integers(min_value=0, max_value=400), st.integers(1, 8).map(bytes)),
    st.tuples(st.just("overwrite"), st.integers(min_value=0, max_value=400), st.binary(min_size=1, max_size=8)),
)


def mutate(buf: bytes, op: tuple[str, int, bytes]) -> bytes:
    kind, i, arg = op
    i = i % (len(buf) + 1)
    if kind == "truncate":
        return buf[:i]
    if kind == "flip":
        if not buf:
            return buf
        i = min(i, len(buf) - 1)
        b = bytearray(buf)
        b[i] ^= arg[0]
        return bytes(b)
    if kind == "insert":
        return buf[:i] + arg + buf[i:]
    if kind == "delete":
        return buf[:i] + buf[i + len(arg) :]
    return buf[:i] + arg + buf[i + len(arg) :]


@FUZZ
@given(st.sampled_from(VECTOR_NAMES), st.lists(MUTATIONS, min_size=1, max_size=3))
def test_decode_mutated_vectors(name, ops):
    buf = vector_bytes(name)
    for op in ops:
        buf = mutate(buf, op)
    post = decodes_or_cable_error(buf)
    if buf != vector_bytes(name):
        assert verify_post(buf) is False
    if post is not None and buf[96:] == vector_bytes(name)[96:]:
        # Only the key/signature changed: the body decodes identically.
        assert dataclasses.replace(post, public_key=b"", signature=b"") == dataclasses.replace(
            decode_post(vector_bytes(name)), public_key=b"", signature=b""
        )


@FUZZ
@given(st.integers(min_value=0, max_value=len(fixture_records()) - 1), st.lists(MUTATIONS, min_size=1, max_size=2))
def test_decode_mutated_fixture_posts(index, ops):
    original = fixture_records()[index]
    buf = original
    for op in ops:
        buf = mutate(buf, op)
    decodes_or_cable_error(buf)
    if buf != original:
        assert verify_post(buf) is False


def test_decode_rejects_non_bytes_with_type_error():
    # Not wire data at all: a programming error, reported as TypeError.
    with pytest.raises(TypeError):
        decode_post("not bytes")  # type: ignore[arg-type]


# --- 6. varints ---------------------------------------------------------------------

VARINT_KNOWN = [
    (0, b"\x00"),
    (1, b"\x01"),
    (127, b"\x7f"),
    (128, b"\x80\x01"),
    (300, b"\xac\x02"),
    (16383, b"\xff\x7f"),
    (16384, b"\x80\x80\x01"),
    (9876543210, bytes.fromhex("eaadc0e524")),  # the vectors' timestamp
    (2**63 - 1, b"\xff" * 8 + b"\x7f"),
    (2**63, b"\x80" * 9 + b"\x01"),
    (U64_MAX, b"\xff" * 9 + b"\x01"),
]


@pytest.mark.parametrize("value, wire", VARINT_KNOWN)
def test_varint_known_encodings(value, wire):
    assert encode_varint(value) == wire
    assert read_varint(wire, 0) == (value, len(wire))
    # At an offset, followed by other bytes.
    assert read_varint(b"\xaa\xbb" + wire + b"\xcc", 2) == (value, 2 + len(wire))


BOUNDARIES = sorted({0, 2**64 - 1, 2**63} | {2**k + d for k in range(7, 64, 7) for d in (-1, 0)})


@pytest.mark.parametrize("value", BOUNDARIES)
def test_varint_roundtrip_boundaries(value):
    wire = encode_varint(value)
    assert len(wire) == max(1, -(-value.bit_length() // 7))
    assert len(wire) <= 10
    assert read_varint(wire, 0) == (value, len(wire))


@FAST
@given(st.integers(min_value=0, max_value=U64_MAX), st.binary(max_size=4), st.binary(max_size=4))
def test_varint_roundtrip_property(value, before, after):
    wire = encode_varint(value)
    assert read_varint(before + wire + after, len(before)) == (value, len(before) + len(wire))
    assert all(b & 0x80 for b in wire[:-1]) and not wire[-1] & 0x80
    if len(wire) > 1:
        assert wire[-1] != 0  # minimal


@pytest.mark.parametrize("value", [-1, -(2**70), 2**64, 2**70])
def test_encode_varint_out_of_range(value):
    with pytest.raises(LimitError):
        encode_varint(value)


@pytest.mark.parametrize(
    "wire, error",
    [
        (b"", TruncatedError),
        (b"\x80", TruncatedError),
        (b"\xff\xff", TruncatedError),
        (b"\x80\x00", VarintError),  # non-minimal 0
        (b"\xff\x00", VarintError),  # non-minimal 127
        (b"\x80\x80\x00", VarintError),
        (b"\x80" * 9 + b"\x00", VarintError),  # 10 bytes, non-minimal
        (b"\x80" * 10 + b"\x01", VarintError),  # 11 bytes
        (b"\x80" * 11 + b"\x01", VarintError),  # 12 bytes
        (b"\xff" * 10 + b"\x01", VarintError),
        (b"\xff" * 9 + b"\x02", VarintError),  # 2**64
        (b"\x80" * 9 + b"\x02", VarintError),  # 2**64 exactly
        (b"\xff" * 9 + b"\x7f", VarintError),
        (b"\x80" * 11, VarintError),  # 11th byte present: too long, not "truncated"
        (b"\xff" * 11, VarintError),
        (b"\x80" * 1000 + b"\x01", VarintError),  # long continuation run
    ],
)
def test_read_varint_errors(wire, error):
    with pytest.raises(error):
        read_varint(wire, 0)
    with pytest.raises(error):
        read_varint(b"\x05" + wire, 1)


def test_read_varint_at_end_of_buffer():
    with pytest.raises(TruncatedError):
        read_varint(b"\x01\x02", 2)
    # Ten continuation bytes then the end: refused either way (the tenth byte
    # of a valid u64 varint never has its continuation bit set).
    with pytest.raises(DecodeError):
        read_varint(b"\x80" * 10, 0)


def test_overlong_varint_refused_quickly():
    # A megabyte of continuation bytes is refused after the 11th byte.
    wire = b"\x80" * (1 << 20) + b"\x01"
    t0 = time.perf_counter()
    with pytest.raises(VarintError):
        read_varint(wire, 0)
    with pytest.raises(VarintError):
        decode_post(raw_post(JOIN, vstr("general"), timestamp=wire))
    assert time.perf_counter() - t0 < 0.5


def test_varint_error_classes_are_decode_errors():
    for cls in (TruncatedError, TrailingBytesError, VarintError, Utf8Error, UnknownPostTypeError):
        assert issubclass(cls, DecodeError)
    assert issubclass(DecodeError, CableError) and issubclass(LimitError, CableError)
    assert not issubclass(LimitError, DecodeError)


@FUZZ
@given(st.binary(max_size=14))
def test_read_varint_arbitrary_bytes(wire):
    try:
        value, end = read_varint(wire, 0)
    except (TruncatedError, VarintError):
        return
    assert 0 <= value <= U64_MAX
    assert 1 <= end <= 10
    # Whatever is accepted is the one canonical encoding of its value.
    assert encode_varint(value) == wire[:end]


def test_limit_constants_match_spec():
    assert codec.MAX_TEXT_BYTES == 4096
    assert codec.CHANNEL_CODEPOINTS == (1, 64)
    assert codec.MAX_TOPIC_CODEPOINTS == 512
    assert codec.INFO_KEY_CODEPOINTS == (1, 128)
    assert codec.MAX_INFO_VALUE_BYTES == 4096
    assert codec.NAME_CODEPOINTS == (1, 32)
    assert (TEXT, DELETE, INFO, TOPIC, JOIN, LEAVE) == (0, 1, 2, 3, 4, 5)


@pytest.mark.parametrize("name", VECTOR_NAMES)
def test_decoded_post_is_an_ordinary_frozen_post(name):
    """decode_post builds posts without the dataclass __init__ (speed): they must behave like Post(...)."""
    post = decode_post(vector_bytes(name))
    rebuilt = Post(**{f.name: getattr(post, f.name) for f in dataclasses.fields(Post)})
    assert post == rebuilt and hash(post) == hash(rebuilt) and repr(post) == repr(rebuilt)
    with pytest.raises(dataclasses.FrozenInstanceError):
        post.timestamp = 1
    assert decode_post(bytearray(vector_bytes(name))) == post == decode_post(memoryview(vector_bytes(name)))


def test_one_link_fast_path_agrees_with_the_general_reader():
    link = bytes(range(32))
    one = raw_post(JOIN, vstr("general"), links=encode_varint(1) + link)
    assert decode_post(one).links == (link,)
    raises_with_label(TruncatedError, raw_post(JOIN, b"", links=encode_varint(1) + link[:31]), "one short link")
