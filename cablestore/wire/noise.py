"""The Noise Protocol Framework (revision 34), for the one protocol Cable uses: ``Noise_XXpsk0_25519_ChaChaPoly_BLAKE2b``.

Written here from the Noise specification's sections 5 (processing rules),
9 (pre-shared keys) and 12 (the crypto functions), over pynacl's libsodium
(X25519, ChaCha20-Poly1305 IETF) and :mod:`hashlib`'s BLAKE2b; checked
byte for byte against published test vectors (``tests/test_noise.py``).

- :class:`CipherState`: a key and a 64-bit nonce; ``encrypt_with_ad`` and
  ``decrypt_with_ad``.
- :class:`SymmetricState`: the chaining key, the handshake hash and a
  :class:`CipherState`; ``mix_key``, ``mix_hash``, ``mix_key_and_hash``,
  ``encrypt_and_hash``, ``decrypt_and_hash``, ``split``.
- :class:`HandshakeState`: the pattern ``XXpsk0`` for one side; three
  ``write_message`` / ``read_message`` calls, then ``split()``.

Every failure (a MAC that does not verify, an all-zero DH output, a message
of the wrong size, a call out of turn) raises
:class:`cablestore.errors.HandshakeError`; nothing of nacl's crosses this API.
Rekey is not implemented: Cable does not use it.
"""

from __future__ import annotations

import hashlib
import hmac

from nacl.bindings import (
    crypto_aead_chacha20poly1305_ietf_decrypt,
    crypto_aead_chacha20poly1305_ietf_encrypt,
    crypto_scalarmult,
    crypto_scalarmult_base,
)
from nacl.exceptions import CryptoError
from nacl.utils import random as _random_bytes

from cablestore.errors import ArgumentError, HandshakeError

PROTOCOL_NAME = b"Noise_XXpsk0_25519_ChaChaPoly_BLAKE2b"
DHLEN = 32  # X25519 keys and DH outputs
HASHLEN = 64  # BLAKE2b
KEYLEN = 32  # ChaCha20-Poly1305 keys
TAGLEN = 16  # the Poly1305 MAC
PSKLEN = 32
MAX_NOISE_MESSAGE = 65535  # Noise section 3: no message (handshake or transport) is longer
_MAX_NONCE = 2**64 - 1  # reserved (section 5.1): an encryption with it is refused

# XXpsk0, section 9: the psk token first in the first message.
_PATTERN = (("psk", "e"), ("e", "ee", "s", "es"), ("s", "se"))


def _hash(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=HASHLEN).digest()


def _hmac(key: bytes, data: bytes) -> bytes:
    return hmac.digest(key, data, "blake2b")


def hkdf(chaining_key: bytes, input_key_material: bytes, outputs: int) -> tuple[bytes, ...]:
    """Noise's ``HKDF()`` over HMAC-BLAKE2b: two or three outputs of HASHLEN bytes each (section 4.3)."""
    if outputs not in (2, 3):
        raise ArgumentError(f"HKDF gives 2 or 3 outputs, not {outputs}")
    temp_key = _hmac(chaining_key, input_key_material)
    out = [_hmac(temp_key, b"\x01")]
    for i in range(2, outputs + 1):
        out.append(_hmac(temp_key, out[-1] + bytes([i])))
    return tuple(out)


def public_key_of(private_key: bytes) -> bytes:
    """The X25519 public key of a 32-byte private key."""
    if not isinstance(private_key, (bytes, bytearray)) or len(private_key) != DHLEN:
        raise ArgumentError(f"an X25519 private key is {DHLEN} bytes")
    return crypto_scalarmult_base(bytes(private_key))


def dh(private_key: bytes, public_key: bytes) -> bytes:
    """X25519 of our private key and their public key; an all-zero output (a low-order point) raises :class:`HandshakeError`."""
    if len(public_key) != DHLEN:
        raise HandshakeError(f"a public key is {DHLEN} bytes, got {len(public_key)}")
    try:
        shared = crypto_scalarmult(bytes(private_key), bytes(public_key))
    except (CryptoError, ValueError, TypeError) as e:  # libsodium refuses an all-zero result itself
        raise HandshakeError("the remote key gives an all-zero Diffie-Hellman output") from e
    if not any(shared):
        raise HandshakeError("the remote key gives an all-zero Diffie-Hellman output")
    return shared


def _nonce(n: int) -> bytes:
    # ChaChaPoly (section 12.3): 32 bits of zeros, then the 64-bit nonce little-endian.
    return b"\x00\x00\x00\x00" + n.to_bytes(8, "little")



class CipherState:
    """A key (or none yet) and a nonce; Noise section 5.1."""

    __slots__ = ("_key", "_n")

    def __init__(self, key: bytes | None = None) -> None:
        self._key: bytes | None = None
        self._n = 0
        if key is not None:
            self.initialize_key(key)

    def initialize_key(self, key: bytes | None) -> None:
        """``InitializeKey(key)``: set the key (or clear it with ``None``) and the nonce to zero."""
        if key is not None and len(key) != KEYLEN:
            raise ArgumentError(f"a cipher key is {KEYLEN} bytes")
        self._key = None if key is None else bytes(key)
        self._n = 0

    def has_key(self) -> bool:
        """Whether a key is set (until then encryption is the identity)."""
        return self._key is not None

    @property
    def nonce(self) -> int:
        """The nonce the next encryption or decryption uses."""
        return self._n

    def set_nonce(self, nonce: int) -> None:
        """``SetNonce(nonce)``."""
        self._n = nonce

    def encrypt_with_ad(self, ad: bytes, plaintext: bytes) -> bytes:
        """``EncryptWithAd(ad, plaintext)``: the ciphertext with its 16-byte MAC; the nonce then counts one up."""
        if self._key is None:
            return bytes(plaintext)
        if self._n >= _MAX_NONCE:
            raise HandshakeError("the nonce is exhausted; the session must end")
        if len(plaintext) + TAGLEN > MAX_NOISE_MESSAGE:
            raise ArgumentError(f"a Noise plaintext is at most {MAX_NOISE_MESSAGE - TAGLEN} bytes, got {len(plaintext)}")
        out = crypto_aead_chacha20poly1305_ietf_encrypt(bytes(plaintext), bytes(ad), _nonce(self._n), self._key)
        self._n += 1
        return out

    def decrypt_with_ad(self, ad: bytes, ciphertext: bytes) -> bytes:
        """``DecryptWithAd(ad, ciphertext)``: the plaintext; a MAC that does not verify raises :class:`HandshakeError` (the nonce is then unchanged)."""
        if self._key is None:
            return bytes(ciphertext)
        if self._n >= _MAX_NONCE:
            raise HandshakeError("the nonce is exhausted; the session must end")
        if not TAGLEN <= len(ciphertext) <= MAX_NOISE_MESSAGE:
            raise HandshakeError(f"a ciphertext is {TAGLEN} to {MAX_NOISE_MESSAGE} bytes, got {len(ciphertext)}")
        try:
            out = crypto_aead_chacha20poly1305_ietf_decrypt(bytes(ciphertext), bytes(ad), _nonce(self._n), self._key)
        except (CryptoError, ValueError, TypeError) as e:
            raise HandshakeError("DECRYPT failed: the ciphertext does not authenticate") from e
        self._n += 1
        return out


class SymmetricState:
    """The chaining key ``ck``, the handshake hash ``h`` and a :class:`CipherState`; Noise section 5.2."""

    __slots__ = ("_cs", "ck", "h")

    def __init__(self, protocol_name: bytes = PROTOCOL_NAME) -> None:
        # InitializeSymmetric: a name of at most HASHLEN bytes is padded with zeros, a longer one hashed.
        self.h = protocol_name.ljust(HASHLEN, b"\x00") if len(protocol_name) <= HASHLEN else _hash(protocol_name)
        self.ck = self.h
        self._cs = CipherState()

    def has_key(self) -> bool:
        """Whether the inner cipher has a key."""
        return self._cs.has_key()

    def mix_key(self, input_key_material: bytes) -> None:
        """``MixKey``: a new chaining key and cipher key from ``input_key_material``."""
        self.ck, temp_k = hkdf(self.ck, input_key_material, 2)
        self._cs.initialize_key(temp_k[:KEYLEN])

    def mix_hash(self, data: bytes) -> None:
        """``MixHash``: ``h = HASH(h || data)``."""
        self.h = _hash(self.h + bytes(data))

    def mix_key_and_hash(self, input_key_material: bytes) -> None:
        """``MixKeyAndHash`` (how a psk enters, section 9)."""
        self.ck, temp_h, temp_k = hkdf(self.ck, input_key_material, 3)
        self.mix_hash(temp_h)
        self._cs.initialize_key(temp_k[:KEYLEN])

    def handshake_hash(self) -> bytes:
        """``GetHandshakeHash()``: ``h``, which names this session."""
        return self.h

    def encrypt_and_hash(self, plaintext: bytes) -> bytes:
        """``EncryptAndHash``: encrypt with ``h`` as associated data, then mix the ciphertext into ``h``."""
        ciphertext = self._cs.encrypt_with_ad(self.h, plaintext)
        self.mix_hash(ciphertext)
        return ciphertext

    def decrypt_and_hash(self, ciphertext: bytes) -> bytes:
        """``DecryptAndHash``: decrypt with ``h`` as associated data, then mix the ciphertext into ``h``."""
        plaintext = self._cs.decrypt_with_ad(self.h, ciphertext)
        self.mix_hash(ciphertext)
        return plaintext

    @classmethod
    def resumed(cls, ck: bytes, h: bytes, key: bytes | None, nonce: int) -> SymmetricState:
        """A state with these values (a responder's after message 1, :mod:`cablestore.wire.responder`)."""
        ss = cls.__new__(cls)
        ss.ck, ss.h, ss._cs = ck, h, CipherState(key)
        ss._cs.set_nonce(nonce)
        return ss

    def split(self) -> tuple[CipherState, CipherState]:
        """``Split()``: the two transport ciphers, initiator-to-responder first."""
        temp_k1, temp_k2 = hkdf(self.ck, b"", 2)
        return CipherState(temp_k1[:KEYLEN]), CipherState(temp_k2[:KEYLEN])


class HandshakeState:
    """One side of a ``Noise_XXpsk0_25519_ChaChaPoly_BLAKE2b`` handshake; Noise section 5.3.

    ``static_private`` is this side's X25519 private key, ``psk`` the 32-byte
    pre-shared key.  ``ephemeral_private`` is for test vectors only: left out,
    a fresh ephemeral key is drawn when the first ``e`` token is written.
    The initiator writes messages 1 and 3 and reads 2; the responder the
    other way round.  After the third message :meth:`split` gives the
    transport ciphers and :attr:`remote_static` the other side's static key.
    """

    def __init__(self, *, initiator: bool, prologue: bytes, static_private: bytes, psk: bytes,
                 ephemeral_private: bytes | None = None) -> None:
        if not isinstance(psk, (bytes, bytearray)) or len(psk) != PSKLEN:
            raise ArgumentError(f"the pre-shared key is {PSKLEN} bytes")
        if not isinstance(prologue, (bytes, bytearray)):
            raise ArgumentError("the prologue is bytes")
        self.initiator = bool(initiator)
        self._ss = SymmetricState(PROTOCOL_NAME)
        self._ss.mix_hash(bytes(prologue))
        self._s = (bytes(static_private), public_key_of(static_private))
        self._e = None if ephemeral_private is None else (bytes(ephemeral_private), public_key_of(ephemeral_private))
        self._psk = bytes(psk)
        self._rs: bytes | None = None
        self._re: bytes | None = None
        self._index = 0  # which message of _PATTERN comes next
        self._failed = False

    @classmethod
    def after_message1(cls, prologue: bytes, psk: bytes, read: tuple[SymmetricState, bytes], static_private: bytes) -> HandshakeState:
        """A responder that has read message 1 under ``prologue`` and ``psk`` elsewhere (``read``: the state then and the remote ``e``;
        :meth:`cablestore.wire.responder.Message1Key.try_message1`)."""
        hs = cls(initiator=False, prologue=prologue, static_private=static_private, psk=psk)
        hs._ss, hs._re = read
        hs._index = 1
        return hs

    @property
    def complete(self) -> bool:
        """Whether all three messages are through."""
        return self._index == len(_PATTERN)

    @property
    def remote_static(self) -> bytes | None:
        """The other side's static X25519 public key, once its ``s`` token is read."""
        return self._rs

    @property
    def local_static(self) -> bytes:
        """This side's static X25519 public key."""
        return self._s[1]

    def handshake_hash(self) -> bytes:
        """The handshake hash ``h`` (final once :attr:`complete`)."""
        return self._ss.handshake_hash()

    def _turn(self, writing: bool) -> tuple[str, ...]:
        if self._failed:
            raise HandshakeError("this handshake has failed")
        if self.complete:
            raise HandshakeError("the handshake is complete")
        if (self._index % 2 == 0) != (self.initiator == writing):
            raise HandshakeError(f"message {self._index + 1} is the other side's to {'write' if writing else 'read'}")
        return _PATTERN[self._index]

    def _dh_token(self, token: str) -> None:
        # ee, es, se: the first letter is the initiator's key, the second the responder's.
        mine, theirs = (token[0], token[1]) if self.initiator else (token[1], token[0])
        private = self._e[0] if mine == "e" else self._s[0]
        public = self._re if theirs == "e" else self._rs
        self._ss.mix_key(dh(private, public))

    def write_message(self, payload: bytes = b"") -> bytes:
        """``WriteMessage(payload)``: the next handshake message this side sends."""
        tokens = self._turn(writing=True)
        try:
            out = bytearray()
            for token in tokens:
                if token == "psk":
                    self._ss.mix_key_and_hash(self._psk)
                elif token == "e":
                    if self._e is None:
                        private = _random_bytes(DHLEN)
                        self._e = (private, public_key_of(private))
                    out += self._e[1]
                    self._ss.mix_hash(self._e[1])
                    self._ss.mix_key(self._e[1])  # with a psk, e also keys the cipher (section 9.2)
                elif token == "s":
                    out += self._ss.encrypt_and_hash(self._s[1])
                else:
                    self._dh_token(token)
            out += self._ss.encrypt_and_hash(payload)
        except HandshakeError:
            self._failed = True
            raise
        if len(out) > MAX_NOISE_MESSAGE:
            self._failed = True
            raise ArgumentError(f"a handshake message is at most {MAX_NOISE_MESSAGE} bytes")
        self._index += 1
        return bytes(out)

    def read_message(self, message: bytes) -> bytes:
        """``ReadMessage(message)``: the payload of the other side's next handshake message; anything wrong raises :class:`HandshakeError`."""
        tokens = self._turn(writing=False)
        message = bytes(message)
        if len(message) > MAX_NOISE_MESSAGE:
            self._failed = True
            raise HandshakeError(f"a handshake message is at most {MAX_NOISE_MESSAGE} bytes")
        at = 0
        try:
            for token in tokens:
                if token == "psk":
                    self._ss.mix_key_and_hash(self._psk)
                elif token == "e":
                    self._re = self._take(message, at, DHLEN)
                    at += DHLEN
                    self._ss.mix_hash(self._re)
                    self._ss.mix_key(self._re)
                elif token == "s":
                    n = DHLEN + (TAGLEN if self._ss.has_key() else 0)
                    self._rs = self._ss.decrypt_and_hash(self._take(message, at, n))
                    at += n
                else:
                    self._dh_token(token)
            payload = self._ss.decrypt_and_hash(message[at:])
        except HandshakeError:
            self._failed = True
            raise
        self._index += 1
        return payload

    @staticmethod
    def _take(message: bytes, at: int, n: int) -> bytes:
        if len(message) < at + n:
            raise HandshakeError(f"the handshake message is too short ({len(message)} bytes)")
        return message[at:at + n]

    def split(self) -> tuple[CipherState, CipherState]:
        """The transport ciphers ``(c1, c2)``: c1 encrypts initiator to responder, c2 the other way."""
        if not self.complete:
            raise HandshakeError("the handshake is not complete")
        return self._ss.split()
