"""The Cable Handshake, sans-I/O (cablestore.wire.handshake): both sides in-process, a raw Noise peer for what a good peer never sends, and one echo over real TCP."""

from __future__ import annotations

import asyncio
import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cablestore.errors import ArgumentError, HandshakeError
from cablestore.wire.crypto import Keypair
from cablestore.wire.handshake import (
    CABLE_PROLOGUE,
    END_TIMEOUT_MS,
    HANDSHAKE_TIMEOUT_MS,
    LEGACY_PROLOGUE,
    CableHandshake,
    EndOfStream,
    Failed,
    HandshakeComplete,
    MessageReceived,
    total_len,
)
from cablestore.wire.noise import HandshakeState
from cablestore.wire.static_keys import ed25519_candidates, identify, x25519_of, x25519_private_of

CABAL = bytes(range(32))
ALICE, BOB = Keypair.from_seed(b"a" * 32), Keypair.from_seed(b"b" * 32)


def pair(now: int = 0, key_i: bytes = CABAL, key_r: bytes = CABAL, **kw) -> tuple[CableHandshake, CableHandshake]:
    i = CableHandshake(initiator=True, cabal_key=key_i, keypair=ALICE, now=now, **kw.pop("i", {}))
    r = CableHandshake(initiator=False, cabal_key=key_r, keypair=BOB, now=now, **kw.pop("r", {}))
    return i, r


def pump(a: CableHandshake, b: CableHandshake, now: int = 0, rounds: int = 20) -> tuple[list, list]:
    """Carry bytes both ways until neither side has any; the events each side saw."""
    ea, eb = [], []
    for _ in range(rounds):
        out_a, out_b = a.data_to_send(), b.data_to_send()
        if not out_a and not out_b:
            break
        if out_a:
            eb += b.receive_data(out_a, now)
        if out_b:
            ea += a.receive_data(out_b, now)
    return ea, eb


def connected(**kw) -> tuple[CableHandshake, CableHandshake]:
    i, r = pair(**kw)
    ei, er = pump(i, r)
    assert [type(e) for e in ei] == [HandshakeComplete] and [type(e) for e in er] == [HandshakeComplete]
    return i, r


class RawPeer:
    """Our own Noise handshake with a CableHandshake responder, then frames written by hand (what a good peer never sends)."""

    def __init__(self, responder: CableHandshake, prologue: bytes = CABLE_PROLOGUE, key: bytes = CABAL) -> None:
        self.r = responder
        hs = HandshakeState(initiator=True, prologue=prologue, static_private=x25519_private_of(ALICE), psk=key)
        assert responder.receive_data(hs.write_message(), 0) == []
        hs.read_message(responder.data_to_send())
        self.events = responder.receive_data(hs.write_message(), 0)
        self.tx, self.rx = hs.split()

    def frame(self, total: int, segments: list[bytes]) -> bytes:
        return self.tx.encrypt_with_ad(b"", struct.pack("<I", total)) + b"".join(self.tx.encrypt_with_ad(b"", s) for s in segments)


# --- the handshake ---------------------------------------------------------------------


def test_both_sides_complete_and_learn_each_others_static_key():
    i, r = pair()
    m1 = i.data_to_send()
    assert r.receive_data(m1, 0) == []
    m2 = r.data_to_send()
    (done_i,) = i.receive_data(m2, 0)
    m3 = i.data_to_send()
    (done_r,) = r.receive_data(m3, 0)
    assert (len(m1), len(m2), len(m3)) == (48, 96, 64)  # no length prefix: the spec ferries Noise's messages as they are
    assert done_i.remote_static == x25519_of(BOB.public_key) and done_r.remote_static == x25519_of(ALICE.public_key)
    assert done_i.prologue == done_r.prologue == CABLE_PROLOGUE == b"\x43\x41\x42\x4c\x45\x2f\x31\x2e\x30"
    assert done_i.handshake_hash == done_r.handshake_hash and len(done_i.handshake_hash) == 64
    assert i.handshake_complete and r.handshake_complete and i.deadline is None and r.deadline is None


def test_without_a_keypair_a_fresh_key_is_an_unknown_user():
    i = CableHandshake(initiator=True, cabal_key=CABAL, now=0)
    r = CableHandshake(initiator=False, cabal_key=CABAL, keypair=BOB, now=0)
    pump(i, r)
    assert r.remote_static is not None and identify(r.remote_static, {ALICE.public_key, BOB.public_key}) is None


def test_wrong_cabal_key_fails_both_sides():
    i, r = pair(key_r=bytes(32))
    ei, er = pump(i, r)
    assert [type(e) for e in er] == [Failed] and "cabal key" in str(er[0].error)
    assert ei == [] and r.data_to_send() == b""  # the responder sends nothing back
    (failed,) = i.receive_data(b"", 1)  # ... and closes: the initiator sees the end of the socket
    assert isinstance(failed, Failed) and isinstance(failed.error, HandshakeError)
    i2, r2 = pair(key_r=bytes(32))
    pump(i2, r2)
    assert i2.check_time(HANDSHAKE_TIMEOUT_MS - 1) == [] and [type(e) for e in i2.check_time(HANDSHAKE_TIMEOUT_MS)] == [Failed]


@pytest.mark.parametrize("prologue", [CABLE_PROLOGUE, LEGACY_PROLOGUE])
def test_a_responder_accepts_either_prologue_and_says_which(prologue):
    i, r = pair(i={"prologue": prologue})
    ei, er = pump(i, r)
    assert er[0].prologue == ei[0].prologue == r.prologue == prologue


def test_a_responder_refuses_a_prologue_it_does_not_accept():
    i, r = pair(i={"prologue": LEGACY_PROLOGUE}, r={"accept_prologues": (CABLE_PROLOGUE,)})
    _, er = pump(i, r)
    assert [type(e) for e in er] == [Failed]


def test_garbage_and_truncated_handshake_messages_fail():
    for garbage in (os.urandom(48), bytes(48), os.urandom(1 << 20)):
        _, r = pair()
        (failed,) = r.receive_data(garbage, 0)
        assert isinstance(failed, Failed) and r.data_to_send() == b"" and r.finished and r.buffered == 0
        assert r.receive_data(b"more", 0) == []  # nothing is read after a failure
    i, _ = pair()
    assert [type(e) for e in i.receive_data(os.urandom(96), 0)] == [Failed]
    i, r = pair()
    assert r.receive_data(i.data_to_send()[:30], 0) == [] and r.buffered == 30  # short: waits for the rest ...
    assert [type(e) for e in r.receive_data(b"", 5)] == [Failed]  # ... and the socket ends
    i, r = pair()  # message 1 with 16 bytes too many: the extra is the start of message 3, which fails
    r.receive_data(i.data_to_send() + os.urandom(16), 0)
    i.receive_data(r.data_to_send(), 0)
    assert [type(e) for e in r.receive_data(i.data_to_send(), 0)] == [Failed]


def test_a_tampered_handshake_message_fails_the_initiator():
    i, r = pair()
    r.receive_data(i.data_to_send(), 0)
    m2 = bytearray(r.data_to_send())
    m2[50] ^= 1
    assert [type(e) for e in i.receive_data(bytes(m2), 0)] == [Failed]


def test_the_handshake_has_a_deadline():
    i, r = pair(now=1_000)
    m1 = i.data_to_send()
    assert r.deadline == 1_000 + HANDSHAKE_TIMEOUT_MS
    (late,) = r.receive_data(m1, 1_000 + HANDSHAKE_TIMEOUT_MS)
    assert isinstance(late, Failed) and "in time" in str(late.error)
    i, r = pair(now=0, r={"timeout_ms": 50})
    r.receive_data(i.data_to_send(), 10)
    assert r.check_time(49) == [] and [type(e) for e in r.check_time(50)] == [Failed]


# --- post-handshake operation ------------------------------------------------------------


def test_messages_flow_both_ways():
    i, r = connected()
    i.send_message(b"hello")
    r.send_message(b"world")
    r.send_message(b"!")
    ei, er = pump(i, r)
    assert ei == [MessageReceived(b"world"), MessageReceived(b"!")] and er == [MessageReceived(b"hello")]


def test_total_len_is_the_specs_formula():
    assert total_len(0) == 16 and total_len(1) == 17 and total_len(65519) == 65535
    assert total_len(65520) == 65535 + 1 + 16 and total_len(2 * 65519) == 65535 + 65519 + 16
    assert total_len(155719) == 2 * 65535 + 24681 + 16  # §4.2.1's example: S₃ is 24,681 bytes


@pytest.mark.parametrize("size", [65519, 65520, 2 * 65519, 200_000])
def test_a_large_message_is_fragmented_both_ways(size):
    i, r = connected()
    big = os.urandom(size)
    i.send_message(big)
    wire = i.data_to_send()
    assert len(wire) == 20 + total_len(size) == 20 + size + 16 * -(-size // 65519)
    assert r.receive_data(wire, 0) == [MessageReceived(big)]
    r.send_message(big[::-1])
    assert pump(i, r)[0] == [MessageReceived(big[::-1])]


def test_end_of_stream_both_ways():
    for closer in ("initiator", "responder"):
        i, r = connected()
        a, b = (i, r) if closer == "initiator" else (r, i)
        a.send_message(b"last")
        a.end(100)
        assert a.deadline == 100 + END_TIMEOUT_MS
        with pytest.raises(HandshakeError):
            a.send_message(b"after the end")
        eb = b.receive_data(a.data_to_send(), 0)
        assert eb == [MessageReceived(b"last"), EndOfStream()] and b.finished
        answer = b.data_to_send()
        assert len(answer) == 20 + 16  # the marker: totalLen 16, one empty segment with its MAC
        assert a.receive_data(answer, 0) == [EndOfStream()] and a.finished and a.data_to_send() == b""


def test_end_of_stream_times_out_and_a_bare_socket_end_is_a_failure():
    i, r = connected()
    i.end(0)
    i.data_to_send()
    assert i.check_time(END_TIMEOUT_MS - 1) == [] and [type(e) for e in i.check_time(END_TIMEOUT_MS)] == [Failed]
    i, r = connected()
    assert [type(e) for e in r.receive_data(b"", 0)] == [Failed]  # truncated: no marker before the socket ended


def test_a_bare_zero_length_is_accepted_as_the_marker():
    r = CableHandshake(initiator=False, cabal_key=CABAL, keypair=BOB, now=0)
    peer = RawPeer(r)
    assert [type(e) for e in peer.events] == [HandshakeComplete]
    assert r.receive_data(peer.tx.encrypt_with_ad(b"", bytes(4)), 0) == [EndOfStream()]  # cable-handshake.ts's writeEos


def test_a_legacy_prologue_peer_completes_with_the_responder():
    r = CableHandshake(initiator=False, cabal_key=CABAL, keypair=BOB, now=0)
    peer = RawPeer(r, prologue=LEGACY_PROLOGUE)
    assert [type(e) for e in peer.events] == [HandshakeComplete] and r.prologue == LEGACY_PROLOGUE


def test_a_tampered_segment_or_length_ends_the_connection():
    for where in (3, 25):  # inside the length frame, inside the segment
        i, r = connected()
        i.send_message(b"x" * 100)
        wire = bytearray(i.data_to_send())
        wire[where] ^= 0x80
        (failed,) = r.receive_data(bytes(wire), 0)
        assert isinstance(failed, Failed) and "DECRYPT" in str(failed.error)
        with pytest.raises(HandshakeError):
            r.send_message(b"no")  # the channel is gone


def test_a_length_over_the_bound_ends_the_connection_before_buffering():
    r = CableHandshake(initiator=False, cabal_key=CABAL, keypair=BOB, now=0, max_message=1000)
    peer = RawPeer(r)
    (failed,) = r.receive_data(peer.tx.encrypt_with_ad(b"", struct.pack("<I", total_len(1001))), 0)  # only the 20-byte length
    assert isinstance(failed, Failed) and "limit 1000" in str(failed.error)
    r = CableHandshake(initiator=False, cabal_key=CABAL, keypair=BOB, now=0, max_message=1000)
    peer = RawPeer(r)
    assert r.receive_data(peer.frame(total_len(1000), [b"y" * 1000]), 0) == [MessageReceived(b"y" * 1000)]


def test_a_last_segment_shorter_than_its_mac_ends_the_connection():
    for total in (5, 65535 + 10):
        r = CableHandshake(initiator=False, cabal_key=CABAL, keypair=BOB, now=0)
        peer = RawPeer(r)
        (failed,) = r.receive_data(peer.tx.encrypt_with_ad(b"", struct.pack("<I", total)), 0)
        assert isinstance(failed, Failed) and "MAC" in str(failed.error)


def test_misuse_is_refused():
    i, _ = pair()
    with pytest.raises(HandshakeError):
        i.send_message(b"too early")
    i, r = connected()
    with pytest.raises(ArgumentError):
        i.send_message(b"")
    with pytest.raises(ArgumentError):
        CableHandshake(initiator=True, cabal_key=b"short", now=0)
    with pytest.raises(ArgumentError):
        CableHandshake(initiator=False, cabal_key=CABAL, now=0, accept_prologues=())


def test_nothing_is_held_beyond_the_frame_being_read():
    i, r = connected()
    i.send_message(os.urandom(200_000))
    wire = i.data_to_send()
    partial = []
    for at in range(0, len(wire) - 1, 50_000):  # chunks larger than a segment: the rest of a chunk is not held whole
        events = r.receive_data(wire[at:min(at + 50_000, len(wire) - 1)], 0)
        partial.append(r.buffered - len(r._message))  # the part of a frame read so far
    assert events == [] and all(p < 65_535 for p in partial) and r.buffered == 3 * 65_519 + (200_000 - 3 * 65_519 + 16) - 1  # 3 segments decrypted, the 4th but a byte
    assert [type(e) for e in r.receive_data(wire[-1:], 0)] == [MessageReceived] and r.buffered == 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(min_size=1, max_size=300) | st.sampled_from([b"\0" * 65519, b"\1" * 70_000]), max_size=6), st.data())
def test_any_chunking_of_the_stream_gives_the_same_events(messages, data):
    i, r = pair()
    r.receive_data(i.data_to_send(), 0)
    i.receive_data(r.data_to_send(), 0)
    for m in messages:
        i.send_message(m)
    i.end(0)
    stream = i.data_to_send()  # message 3, every message, the marker
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    events = []
    for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        if b > a:  # a socket never reads b"" but at its end
            events += r.receive_data(stream[a:b], 0)
    assert [type(events[0]), *events[1:]] == [HandshakeComplete, *map(MessageReceived, messages), EndOfStream()]


# --- static keys -------------------------------------------------------------------------


def test_static_keys_map_between_ed25519_and_x25519():
    for k in (ALICE, BOB, Keypair()):
        x = x25519_of(k.public_key)
        assert k.public_key in ed25519_candidates(x) and len(ed25519_candidates(x)) == 2
        assert identify(x, {k.public_key}) == k.public_key
        assert identify(x, lambda key, k=k: key == k.public_key) == k.public_key
    assert identify(x25519_of(ALICE.public_key), [BOB.public_key]) is None
    with pytest.raises(ArgumentError):
        x25519_of(b"short")
    with pytest.raises(ArgumentError):
        x25519_of(bytes(32))  # a small-order point is no user's key


# --- real sockets --------------------------------------------------------------------------


def test_an_echo_over_real_tcp():
    """A tiny echo server and client on 127.0.0.1, each driving its CableHandshake from asyncio streams."""
    big = os.urandom(150_000)

    def now() -> int:
        return int(asyncio.get_running_loop().time() * 1000)

    async def drive(hs: CableHandshake, reader, writer, on_event) -> list:
        seen = []
        writer.write(hs.data_to_send())
        while not hs.finished:
            timeout = None if hs.deadline is None else max(0, hs.deadline - now()) / 1000
            try:
                data = await asyncio.wait_for(reader.read(65536), timeout)
            except TimeoutError:
                seen += hs.check_time(now())
                continue
            for event in hs.receive_data(data, now()):
                seen.append(event)
                on_event(hs, event)
            writer.write(hs.data_to_send())
            await writer.drain()
        writer.close()
        return seen

    async def main() -> tuple[list, list]:
        server_events = []

        def echo(hs, event):
            if isinstance(event, MessageReceived):
                hs.send_message(event.data)

        async def handle(reader, writer):
            hs = CableHandshake(initiator=False, cabal_key=CABAL, keypair=BOB, now=now())
            server_events.extend(await drive(hs, reader, writer, echo))

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            hs = CableHandshake(initiator=True, cabal_key=CABAL, keypair=ALICE, now=now())
            got = []

            def client(hs, event):
                if isinstance(event, HandshakeComplete):
                    hs.send_message(b"ping")
                    hs.send_message(big)
                elif isinstance(event, MessageReceived):
                    got.append(event.data)
                    if len(got) == 2:
                        hs.end(now())

            client_events = await drive(hs, reader, writer, client)
            assert got == [b"ping", big]
            for _ in range(100):
                if server_events and isinstance(server_events[-1], EndOfStream):
                    break
                await asyncio.sleep(0.02)
            return client_events, server_events
        finally:
            server.close()
            await server.wait_closed()

    client_events, server_events = asyncio.run(asyncio.wait_for(main(), 30))
    assert [type(e) for e in client_events] == [HandshakeComplete, MessageReceived, MessageReceived, EndOfStream]
    assert [type(e) for e in server_events] == [HandshakeComplete, MessageReceived, MessageReceived, EndOfStream]
    assert client_events[0].remote_static == x25519_of(BOB.public_key) and server_events[0].remote_static == x25519_of(ALICE.public_key)
