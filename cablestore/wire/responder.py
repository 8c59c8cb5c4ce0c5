"""A responder's side of message 1 of the Cable Handshake, for one cabal or many on one listener.

With ``Noise_XXpsk0`` the psk is mixed in before anything of message 1 is
read, so each cabal key's state after ``MixHash(prologue)`` and
``MixKeyAndHash(psk)`` is the same for every connection: :class:`Message1Key`
computes it once, and checking a message 1 (48 bytes: ``e`` and the MAC of
an empty payload) under it costs one hash, three HMACs and one MAC, no
Diffie-Hellman.  :class:`ResponderKeys` tries every cabal's key so, and
``CableHandshake.cabal`` (:class:`cablestore.wire.handshake.CableHandshake`) names the one that
authenticated.  A wrong key for every cabal learns nothing but the close.

Also here: telling a peer that speaks plain Cable from one that speaks the
handshake (:func:`whole_plain_messages`, :func:`plain_cable_start`), so a
plain client and a private listener each learn at once what happened.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

from nacl.bindings import crypto_aead_chacha20poly1305_ietf_encrypt

from cablestore.errors import ArgumentError, CableError
from cablestore.wire.decoding import decode_payload
from cablestore.wire.fields import read_varint
from cablestore.wire.messages import DEPLOYED, DRAFT8
from cablestore.wire.noise import DHLEN, HASHLEN, KEYLEN, PROTOCOL_NAME, PSKLEN, TAGLEN, SymmetricState, _hash, _nonce

CABLE_PROLOGUE = b"CABLE/1.0"  # handshake.md §3.2: 43 41 42 4c 45 2f 31 2e 30
LEGACY_PROLOGUE = b"CABLE1.0"  # what cable-handshake.ts 1.0.0 and cable.rs use
PROLOGUES = (CABLE_PROLOGUE, LEGACY_PROLOGUE)
_NONCE0 = _nonce(0)


def _empty_tag(ad: bytes, key: bytes) -> bytes:
    """The 16-byte MAC of an empty plaintext under ``key`` with nonce 0 and ``ad`` (``EncryptWithAd(ad, b"")``).

    Through pynacl's public binding: about 6 µs a call, where its private
    cffi module (``nacl._sodium``) would take about 2.4; a many-cabal
    listener pays it once per cabal tried (benchmarks/handshakes.py: 1,000
    cabals add about 10 ms of CPU to a handshake with the spec's prologue).
    """
    return crypto_aead_chacha20poly1305_ietf_encrypt(b"", ad, _NONCE0, key)


_blake2b = hashlib.blake2b
_IPAD, _OPAD = bytes(x ^ 0x36 for x in range(256)), bytes(x ^ 0x5C for x in range(256))
_BLOCK = 128  # BLAKE2b's block: HMAC's key pad


class Message1Key:
    """A responder's state for one psk and prologue, computed once, up to message 1's ``e``.

    With psk0 the psk is mixed in before anything of message 1 is read, so
    the chaining key and handshake hash after ``MixHash(prologue)`` and
    ``MixKeyAndHash(psk)`` are the same for every connection of a cabal.
    :meth:`try_message1` then checks a message 1 (``e`` and the 16-byte MAC
    of its empty payload) with one hash, three HMACs and one MAC, no
    Diffie-Hellman: a listener serving many cabals tries each this way.
    """

    __slots__ = ("_h", "_inner", "_outer", "prologue", "psk")

    def __init__(self, prologue: bytes, psk: bytes) -> None:
        if not isinstance(psk, (bytes, bytearray)) or len(psk) != PSKLEN:
            raise ArgumentError(f"the pre-shared key is {PSKLEN} bytes")
        self.prologue, self.psk = bytes(prologue), bytes(psk)
        ss = SymmetricState(PROTOCOL_NAME)
        ss.mix_hash(self.prologue)
        ss.mix_key_and_hash(self.psk)
        self._h = hashlib.blake2b(ss.h, digest_size=HASHLEN)  # h absorbed: h || e is one copy and one update away
        key = ss.ck.ljust(_BLOCK, b"\x00")
        self._inner = hashlib.blake2b(key.translate(_IPAD), digest_size=HASHLEN)  # HMAC(ck, .)'s two pads, absorbed
        self._outer = hashlib.blake2b(key.translate(_OPAD), digest_size=HASHLEN)

    def try_message1(self, message: bytes) -> tuple[SymmetricState, bytes] | None:
        """The state after reading ``message`` (48 bytes) and the remote ephemeral key, or None if it does not authenticate under this psk and prologue."""
        if len(message) != DHLEN + TAGLEN:
            return None
        re, tag = message[:DHLEN], message[DHLEN:]
        h = self._h.copy()
        h.update(re)
        h = h.digest()
        inner = self._inner.copy()
        inner.update(re)
        outer = self._outer.copy()
        outer.update(inner.digest())
        temp_key = outer.digest().ljust(_BLOCK, b"\x00")  # MixKey(re): HKDF(ck, re, 2), its HMACs by hand (no key set-up)
        ipad, opad = temp_key.translate(_IPAD), temp_key.translate(_OPAD)
        ck = _blake2b(opad + _blake2b(ipad + b"\x01").digest()).digest()
        k = _blake2b(opad + _blake2b(ipad + ck + b"\x02").digest()).digest()[:KEYLEN]
        if not hmac.compare_digest(_empty_tag(h, k), tag):
            return None
        return SymmetricState.resumed(ck, _hash(h + tag), k, 1), re


NOT_HANDSHAKE = "the peer does not use the Cable Handshake (no cabal key there?)"
WRONG_KEY = "the handshake failed: the peer does not hold this cabal key"


def whole_plain_messages(data: bytes) -> bool:
    """True if ``data`` is one or more whole plain Cable messages (either framing): what a peer without the handshake sends first."""
    at = 0
    while at < len(data):
        try:
            size, body = read_varint(data, at)
        except CableError:
            return False
        if size == 0 or body + size > len(data):
            return False
        payload = bytes(data[body:body + size])
        for framing in (DEPLOYED, DRAFT8):
            try:
                decode_payload(payload, framing)
                break
            except CableError:
                continue
        else:
            return False
        at = body + size
    return at > 0


def plain_cable_start(data: bytes) -> bool:
    """True if ``data`` begins with a whole plain Cable message (either framing), as a plain client's first request does."""
    try:
        size, at = read_varint(data, 0)
    except CableError:
        return False
    return 0 < size and at + size <= len(data) and whole_plain_messages(bytes(data[: at + size]))


class ResponderKeys:
    """What a responder tries message 1 with: each cabal key's :class:`Message1Key` under each prologue, computed once.

    ``cabal_keys``: one key per cabal, in order (``CableHandshake.cabal``
    is the index of the one that authenticated).  Every cabal's first
    prologue is tried before any second one, so an initiator with the
    spec's prologue costs one try per cabal at most.
    """

    def __init__(self, cabal_keys: Iterable[bytes], prologues: tuple[bytes, ...] = PROLOGUES) -> None:
        keys = [bytes(k) for k in cabal_keys]
        if not keys or any(len(k) != PSKLEN for k in keys):
            raise ArgumentError(f"a responder needs at least one cabal key of {PSKLEN} bytes")
        if len(set(keys)) != len(keys):
            raise ArgumentError("two cabals have the same cabal key")
        if not prologues or not all(isinstance(p, (bytes, bytearray)) for p in prologues):
            raise ArgumentError("a responder accepts at least one prologue, as bytes")
        self.count = len(keys)
        self.entries = [(index, Message1Key(bytes(p), key)) for p in prologues for index, key in enumerate(keys)]

    def find(self, message: bytes) -> tuple[int, Message1Key, tuple] | None:
        """(cabal index, its key, what reading gave) for the first key that authenticates ``message``, else None."""
        message = bytes(message)
        for index, key in self.entries:
            read = key.try_message1(message)
            if read is not None:
                return index, key, read
        return None


