"""Wire message codec: cable.js 0.2.1 vectors, both framings, streaming, limits, hostile bytes.

The vectors come from ``tests/data/cable-js-0.2.1.json`` (cable.js 0.2.1 /
Rust shared vectors, CC0; see ``tests/data/README.md``), which holds eight
message vectors (types 0-7), and ``tests/data/cable-js-0.2.1-generated.json``:
eight more written by the real cable.js 0.2.1 encoder (``interop/vectors.js``)
for what the shared ones lack: the moderation state request (type 8),
concluding responses and live requests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cablestore.errors import (
    CableError,
    FramingError,
    LimitError,
    MessageError,
    MessageTooLargeError,
    TtlError,
    UnknownMessageTypeError,
)
from cablestore.wire import decoding as D
from cablestore.wire import messages as M

VECTORS = json.loads((Path(__file__).parent / "data" / "cable-js-0.2.1.json").read_text())
MESSAGE_VECTORS = [k for k in VECTORS if not k.endswith("binary") and ("request" in k or "response" in k)]
GENERATED = json.loads((Path(__file__).parent / "data" / "cable-js-0.2.1-generated.json").read_text())
GENERATED_VECTORS = [k for k in GENERATED if not k.endswith("binary")]


def test_every_message_type_of_the_vectors_is_covered():
    types = {VECTORS[k]["msg_type"] for k in MESSAGE_VECTORS}
    assert types == set(range(8))
    assert {GENERATED[k]["msg_type"] for k in GENERATED_VECTORS} >= {0, 1, 2, 4, 5, 6, 8}




@pytest.mark.parametrize("vectors, name", [(VECTORS, n) for n in MESSAGE_VECTORS] + [(GENERATED, n) for n in GENERATED_VECTORS])
def test_vectors_byte_exact(vectors, name):
    wire = bytes.fromhex(vectors[name + " binary"])
    m = M.messages_from_json(vectors[name])
    assert M.encode(m) == wire
    assert D.decode(wire) == m
    assert D.Decoder().feed(wire + wire) == [m, m]


def test_moderation_state_request_layout():
    m = M.ModerationStateRequest(b"\x04\xba\xaf\xfb", ("myco", "bike_life"), 1, 1234, ttl=3)
    body = bytes([8]) + bytes(4) + m.req_id + b"\x03" + b"\x04myco\x09bike_life\x00" + b"\x01" + bytes([0xD2, 0x09])
    wire = bytes([len(body)]) + body
    assert M.encode(m) == wire
    assert D.decode(wire) == m


def test_draft8_framing_has_no_circuit_or_ttl_and_an_8_byte_req_id():
    m = M.TimeRangeRequest(b"12345678", "qigong", 0, 2033, 21)
    wire = M.encode(m, M.DRAFT8)
    assert wire == bytes.fromhex("14" "04" + b"12345678".hex() + "067169676f6e6700f10f15")
    assert D.decode(wire, M.DRAFT8) == m
    with pytest.raises(LimitError):
        M.encode(m)  # an 8-byte req_id does not fit the deployed framing
    cancel = M.CancelRequest(b"12345678", cancel_id=b"abcdefgh")
    assert D.decode(M.encode(cancel, M.DRAFT8), M.DRAFT8) == cancel


# --- property tests ------------------------------------------------------------------

req4 = st.binary(min_size=4, max_size=4)
hashes = st.lists(st.binary(min_size=32, max_size=32), max_size=5).map(tuple)
channel = st.text(min_size=1, max_size=64)
u64 = st.integers(0, (1 << 64) - 1)
ttl = st.integers(0, 16)
posts = st.lists(st.binary(min_size=1, max_size=300), max_size=4).map(tuple)


def messages(req=req4, with_ttl=True):
    t = ttl if with_ttl else st.just(0)
    circuit = req4 if with_ttl else st.just(M.NO_CIRCUIT)
    return st.one_of(
        st.builds(M.HashResponse, req, hashes, circuit_id=circuit),
        st.builds(M.PostResponse, req, posts),
        st.builds(M.ChannelListResponse, req, st.lists(channel, max_size=4).map(tuple)),
        st.builds(M.PostRequest, req, hashes, ttl=t),
        st.builds(M.CancelRequest, req, req, ttl=t),
        st.builds(M.TimeRangeRequest, req, channel, u64, u64, u64, ttl=t),
        st.builds(M.ChannelStateRequest, req, channel, st.integers(0, 1), ttl=t),
        st.builds(M.ChannelListRequest, req, u64, u64, ttl=t),
        st.builds(M.ModerationStateRequest, req, st.lists(channel, max_size=3).map(tuple), st.integers(0, 1), u64, ttl=t),
    )


@settings(max_examples=400, deadline=None)
@given(messages())
def test_round_trip_deployed(m):
    assert D.decode(M.encode(m)) == m


@settings(max_examples=200, deadline=None)
@given(messages(st.binary(min_size=8, max_size=8), with_ttl=False))
def test_round_trip_draft8(m):
    assert D.decode(M.encode(m, M.DRAFT8), M.DRAFT8) == m


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(messages(), min_size=1, max_size=6), st.data())
def test_stream_split_anywhere(ms, data):
    wire = b"".join(M.encode(m) for m in ms)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=8)))
    decoder, out, last = D.Decoder(), [], 0
    for cut in [*cuts, len(wire)]:
        out += decoder.feed(wire[last:cut])
        last = cut
    assert out == ms
    assert decoder.buffered == 0


@settings(max_examples=1500, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_cable_errors(buf):
    for framing in (M.DEPLOYED, M.DRAFT8):
        try:
            D.decode(buf, framing)
        except CableError:
            pass
        for item in D.Decoder(framing).feed(buf):
            assert isinstance(item, (M.Message, CableError))


@settings(max_examples=300, deadline=None)
@given(messages(), st.integers(0, 200), st.integers(0, 255))
def test_mutated_messages_raise_only_cable_errors(m, at, value):
    wire = bytearray(M.encode(m))
    wire[at % len(wire)] = value
    try:
        D.decode(bytes(wire))
    except CableError:
        pass


# --- limits and hostile input ------------------------------------------------------


def frame(payload: bytes) -> bytes:
    from cablestore.wire.codec import encode_varint

    return encode_varint(len(payload)) + payload


HEAD = bytes(4) + b"RQID"


def test_hash_response_naming_a_million_hashes_is_refused_before_allocating():
    wire = frame(b"\x00" + HEAD + bytes([0xC0, 0x84, 0x3D]) + bytes(64))  # 1_000_000 hashes, 2 present
    with pytest.raises(LimitError):
        D.decode(wire)
    small = M.Limits(max_hashes=10**7)
    with pytest.raises(MessageError, match="ends inside"):
        D.decode(wire, limits=small)


def test_oversized_message_is_a_framing_error_before_buffering():
    decoder = D.Decoder(limits=M.Limits(max_message=1000))
    (err,) = decoder.feed(bytes([0xE9, 0x07]))  # msg_len 1001: nothing more needed to refuse
    assert isinstance(err, MessageTooLargeError)
    assert decoder.broken is err and decoder.buffered == 0
    assert decoder.feed(b"\x00" * 100) == []


def test_truncated_message_waits_then_decodes():
    wire = bytes.fromhex(VECTORS["hash response binary"])
    decoder = D.Decoder()
    assert decoder.feed(wire[:-1]) == []
    assert decoder.buffered == len(wire) - 1
    assert len(decoder.feed(wire[-1:])) == 1


def test_truncated_body_inside_its_frame_is_a_message_error():
    with pytest.raises(MessageError):
        D.decode(frame(b"\x00" + HEAD + b"\x02" + bytes(40)))


def test_unknown_type_is_skipped_and_the_stream_goes_on():
    good = bytes.fromhex(VECTORS["cancel request binary"])
    items = D.Decoder().feed(frame(b"\x2a" + HEAD + b"whatever") + good)
    assert isinstance(items[0], UnknownMessageTypeError)
    assert items[1] == D.decode(good)


@pytest.mark.parametrize(
    "payload, error",
    [
        (b"\x06" + HEAD + b"\x11\x00\x00", TtlError),  # ttl 17
        (b"\x05" + HEAD + b"\x00\x01a\x02", LimitError),  # future 2
        (b"\x05" + HEAD + b"\x00\x00\x00", LimitError),  # empty channel
        (b"\x05" + HEAD + b"\x00\x41" + b"a" * 65 + b"\x00", LimitError),  # 65 codepoints
        (b"\x05" + HEAD + b"\x00\x01\xff\x00", MessageError),  # not UTF-8
        (b"\x06" + HEAD + b"\x00\x00\x00\x00", MessageError),  # trailing byte
        (b"\x01" + HEAD + b"\x81\x80\x04" + bytes(10), LimitError),  # 65537-byte post
    ],
)
def test_field_limits(payload, error):
    with pytest.raises(error):
        D.decode(frame(payload))


def test_msg_len_zero_and_overlong_varint_break_the_stream():
    assert isinstance(D.Decoder().feed(b"\x00")[0], FramingError)
    assert isinstance(D.Decoder().feed(b"\xff" * 11)[0], FramingError)


def test_encode_refuses_what_decode_refuses():
    with pytest.raises(TtlError):
        M.encode(M.PostRequest(b"abcd", (), ttl=17))
    with pytest.raises(LimitError):
        M.encode(M.ChannelStateRequest(b"abcd", "x", future=2))
    with pytest.raises(LimitError):
        M.encode(M.HashResponse(b"abcd", (b"short",)))


def test_decoder_returns_limit_errors_and_goes_on():
    good = bytes.fromhex(VECTORS["cancel request binary"])
    million = frame(b"\x00" + HEAD + bytes([0xC0, 0x84, 0x3D]) + bytes(64))
    items = D.Decoder().feed(million + good)
    assert isinstance(items[0], LimitError) and items[1] == D.decode(good)
