"""Hostile input to a peer: each is dropped with a specific CableError; peer and store unharmed."""

from __future__ import annotations

import logging

import pytest

from cablestore import TEXT, Store, post_hash
from cablestore.errors import (
    DuplicateRequestError,
    LimitError,
    MessageError,
    MessageTooLargeError,
    TtlError,
    UnknownMessageTypeError,
    UnknownRequestError,
    UnsolicitedPostError,
)
from cablestore.peer import Node, Refused
from cablestore.wire import messages as M
from cablestore.wire.codec import encode_varint

from .conftest import keypair, post
from .peer_helpers import WALL, responses


def frame(payload: bytes) -> bytes:
    return encode_varint(len(payload)) + payload


@pytest.fixture
def peer(tmp_path):
    with Store(tmp_path / "s") as store:
        store.ingest(post(keypair("alice"), TEXT, WALL - 1000, channel="general", text="hello"))
        conn = Node(store).connect("hostile")
        wanted = post(keypair("bob"), TEXT, WALL - 500, channel="general", text="wanted")
        job = conn.request_posts([post_hash(wanted)], now=WALL)
        (request,) = responses(conn.data_to_send())
        yield store, conn, request.req_id, wanted, job


def hostile_inputs(req_id: bytes, wanted: bytes):
    big_post = b"\x00" * (M.DEFAULT_LIMITS.max_post + 1)
    forged = wanted[:50] + bytes([wanted[50] ^ 0xFF]) + wanted[51:]
    other = post(keypair("mallory"), TEXT, WALL - 100, channel="general", text="unasked")
    head = bytes(4)
    return {
        "unknown type": (frame(b"\x63" + head + b"RQID"), UnknownMessageTypeError, False),
        "truncated body": (frame(b"\x00" + head + req_id + b"\x05" + bytes(31)), MessageError, False),
        "million hashes": (frame(b"\x00" + head + req_id + encode_varint(10**6) + bytes(64)), LimitError, False),
        "oversized post": (frame(b"\x01" + head + req_id + encode_varint(len(big_post)) + big_post + b"\x00"), LimitError, False),
        "forged post": (M.encode(M.PostResponse(req_id, (forged,))), UnsolicitedPostError, False),
        "unsolicited post": (M.encode(M.PostResponse(req_id, (other,))), UnsolicitedPostError, False),
        "unknown req_id": (M.encode(M.HashResponse(b"nope", (b"\x01" * 32,))), UnknownRequestError, False),
        "ttl 17": (frame(b"\x06" + head + b"RQ17" + b"\x11\x00\x00"), TtlError, False),
        "oversized message": (encode_varint(M.DEFAULT_LIMITS.max_message + 1) + b"\x00" * 100, MessageTooLargeError, True),
    }


@pytest.mark.parametrize("name", list(hostile_inputs(b"abcd", b"x" * 200)))
def test_hostile_input_is_dropped_with_a_specific_error(peer, name, caplog):
    store, conn, req_id, wanted, job = peer
    data, error, closes = hostile_inputs(req_id, wanted)[name]
    before = list(store.items())
    with caplog.at_level(logging.INFO, logger="cablestore.peer"):
        events = conn.receive_data(data, WALL)
    refused = [e.error for e in events if isinstance(e, Refused)]
    assert refused and all(isinstance(e, error) for e in refused), refused
    assert error.__name__ in caplog.text
    assert list(store.items()) == before
    assert conn.closed is closes
    if closes:
        assert conn.error is not None and not conn.state.requests
        return
    conn.receive_data(M.encode(M.ChannelListRequest(b"LIST", 0, 0)), WALL)
    assert responses(conn.data_to_send()) == [M.ChannelListResponse(b"LIST", ("general",))]
    if name in MALFORMED_ANSWERS:  # a body that does not decode, naming our request: that request fails at once, with the reason
        assert job.done and not job.complete and job.reason.startswith("malformed answer: ") and not conn.state.requests
        return
    conn.receive_data(M.encode(M.PostResponse(req_id, (wanted,))), WALL)
    assert post_hash(wanted) in store  # the request it sabotaged still works


MALFORMED_ANSWERS = {"truncated body", "million hashes", "oversized post"}


def test_a_message_split_across_reads_and_several_in_one_read(peer):
    store, conn, req_id, wanted, job = peer
    wire = M.encode(M.ChannelListRequest(b"L001", 0, 0)) + M.encode(M.ChannelListRequest(b"L002", 0, 0))
    for i in range(len(wire) - 1):
        assert conn.receive_data(wire[i : i + 1], WALL) == []
    conn.receive_data(wire[-1:] + M.encode(M.ChannelListRequest(b"L003", 0, 0)), WALL)
    assert [m.req_id for m in responses(conn.data_to_send())] == [b"L001", b"L002", b"L003"]


def test_duplicate_request_is_answered_once(peer):
    store, conn, *_ = peer
    request = M.encode(M.TimeRangeRequest(b"DUP1", "general", 0, 0, 0))
    conn.receive_data(request, WALL)
    first = responses(conn.data_to_send())
    events = conn.receive_data(request, WALL)
    assert [type(e.error) for e in events] == [DuplicateRequestError]
    assert first and conn.data_to_send() == b""
