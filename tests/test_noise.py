"""The Noise layer (cablestore.wire.noise) against published test vectors for Noise_XXpsk0_25519_ChaChaPoly_BLAKE2b, and its refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cablestore.errors import ArgumentError, CableError, HandshakeError
from cablestore.wire.noise import (
    PROTOCOL_NAME,
    CipherState,
    HandshakeState,
    SymmetricState,
    dh,
    hkdf,
    public_key_of,
)

VECTORS = json.loads((Path(__file__).parent / "data" / "noise_vectors.json").read_text())["vectors"]


def _pair(v: dict) -> tuple[HandshakeState, HandshakeState]:
    common = {"prologue": bytes.fromhex(v["prologue"]), "psk": bytes.fromhex(v["psk"])}
    i = HandshakeState(initiator=True, static_private=bytes.fromhex(v["init_static"]),
                       ephemeral_private=bytes.fromhex(v["init_ephemeral"]), **common)
    r = HandshakeState(initiator=False, static_private=bytes.fromhex(v["resp_static"]),
                       ephemeral_private=bytes.fromhex(v["resp_ephemeral"]), **common)
    return i, r


def test_the_vectors_are_for_this_protocol():
    assert len(VECTORS) == 4
    assert {v["protocol_name"] for v in VECTORS} == {PROTOCOL_NAME.decode()}


@pytest.mark.parametrize("v", VECTORS, ids=lambda v: f"prologue={v['prologue'] or 'empty'},payload={v['messages'][0]['payload'] or 'empty'}")
def test_handshake_and_transport_messages_are_byte_identical_to_the_vectors(v):
    i, r = _pair(v)
    msgs = v["messages"]
    for n, m in enumerate(msgs[:3]):
        writer, reader = (i, r) if n % 2 == 0 else (r, i)
        payload = bytes.fromhex(m["payload"])
        sent = writer.write_message(payload)
        assert sent.hex() == m["ciphertext"]
        assert reader.read_message(sent) == payload
    assert i.complete and r.complete
    assert i.handshake_hash() == r.handshake_hash()
    assert i.remote_static == public_key_of(bytes.fromhex(v["resp_static"]))
    assert r.remote_static == public_key_of(bytes.fromhex(v["init_static"]))
    i1, i2 = i.split()
    r1, r2 = r.split()
    for n, m in enumerate(msgs[3:]):
        enc, dec = (i1, r1) if n % 2 == 0 else (r2, i2)
        payload = bytes.fromhex(m["payload"])
        sent = enc.encrypt_with_ad(b"", payload)
        assert sent.hex() == m["ciphertext"]
        assert dec.decrypt_with_ad(b"", sent) == payload


def test_handshake_message_sizes_with_empty_payloads():
    i, r = _pair(VECTORS[0])
    m1 = i.write_message()
    r.read_message(m1)
    m2 = r.write_message()
    i.read_message(m2)
    m3 = i.write_message()
    r.read_message(m3)
    assert (len(m1), len(m2), len(m3)) == (48, 96, 64)


def test_cipher_nonce_is_four_zero_bytes_then_the_counter_little_endian():
    # Encrypting at nonce 2**32 must differ from nonce 0 and match a direct libsodium call with that nonce layout.
    from nacl.bindings import crypto_aead_chacha20poly1305_ietf_encrypt

    key = bytes(range(32))
    c = CipherState(key)
    c.set_nonce(2**32 + 5)
    out = c.encrypt_with_ad(b"ad", b"hello")
    assert out == crypto_aead_chacha20poly1305_ietf_encrypt(b"hello", b"ad", b"\0\0\0\0" + (2**32 + 5).to_bytes(8, "little"), key)
    assert c.nonce == 2**32 + 6


def test_cipher_without_key_is_the_identity_and_the_last_nonce_is_reserved():
    c = CipherState()
    assert not c.has_key() and c.encrypt_with_ad(b"", b"x") == b"x"
    c = CipherState(bytes(32))
    c.set_nonce(2**64 - 1)
    with pytest.raises(HandshakeError):
        c.encrypt_with_ad(b"", b"x")


def test_a_tampered_ciphertext_raises_handshake_error_and_keeps_the_nonce():
    a, b = CipherState(bytes(32)), CipherState(bytes(32))
    ct = bytearray(a.encrypt_with_ad(b"", b"payload"))
    ct[0] ^= 1
    with pytest.raises(HandshakeError) as e:
        b.decrypt_with_ad(b"", bytes(ct))
    assert isinstance(e.value, CableError) and b.nonce == 0
    with pytest.raises(HandshakeError):
        b.decrypt_with_ad(b"", b"short")


def test_an_oversized_plaintext_is_refused():
    with pytest.raises(ArgumentError):
        CipherState(bytes(32)).encrypt_with_ad(b"", bytes(65520))
    assert len(CipherState(bytes(32)).encrypt_with_ad(b"", bytes(65519))) == 65535


def test_all_zero_dh_output_fails():
    private = bytes(range(1, 33))
    for low_order in (bytes(32), (1).to_bytes(32, "little")):
        with pytest.raises(HandshakeError):
            dh(private, low_order)


def test_a_low_order_ephemeral_key_fails_the_responder():
    i, r = _pair(VECTORS[0])
    m1 = bytearray(i.write_message())
    m1[:32] = bytes(32)
    with pytest.raises(HandshakeError):
        r.read_message(bytes(m1))


def test_symmetric_state_pads_the_protocol_name_and_hkdf_chains():
    s = SymmetricState()
    assert s.h == PROTOCOL_NAME + bytes(64 - len(PROTOCOL_NAME)) and s.ck == s.h
    o1, o2, o3 = hkdf(b"k" * 64, b"ikm", 3)
    assert (o1, o2) == hkdf(b"k" * 64, b"ikm", 2) and len({o1, o2, o3}) == 3 and all(len(o) == 64 for o in (o1, o2, o3))


def test_wrong_psk_or_prologue_fails_at_the_first_message():
    v = VECTORS[0]
    i, _ = _pair(v)
    m1 = i.write_message()
    for psk, prologue in ((b"\x01" * 32, b""), (bytes.fromhex(v["psk"]), b"other")):
        r = HandshakeState(initiator=False, prologue=prologue, static_private=bytes.fromhex(v["resp_static"]), psk=psk)
        with pytest.raises(HandshakeError):
            r.read_message(m1)


def test_truncated_and_out_of_turn_messages_fail():
    i, r = _pair(VECTORS[0])
    with pytest.raises(HandshakeError):
        r.write_message()
    m1 = i.write_message()
    with pytest.raises(HandshakeError):
        r.read_message(m1[:20])
    with pytest.raises(HandshakeError):  # a failed state stays failed
        r.read_message(m1)
    with pytest.raises(HandshakeError):
        i.split()


def test_bad_arguments():
    with pytest.raises(ArgumentError):
        HandshakeState(initiator=True, prologue=b"", static_private=bytes(32), psk=b"short")
    with pytest.raises(ArgumentError):
        public_key_of(b"short")
