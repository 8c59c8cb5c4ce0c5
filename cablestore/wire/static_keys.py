"""A Cable user's one keypair as a Noise static key (handshake.md §3.1), and back to the user.

The Ed25519 keypair that signs a user's posts authenticates their
connections too, in its X25519 form (libsodium's
``crypto_sign_ed25519_{pk,sk}_to_curve25519``).  The way back is not
unique: an X25519 public key is the form of two Ed25519 public keys, a
point and its negation, told apart by the sign bit.  Whoever holds the
secret of one can sign as the other, so both name the same holder;
:func:`ed25519_candidates` gives both, and :func:`identify` the one a
caller knows.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from nacl.bindings import (
    crypto_sign_ed25519_pk_to_curve25519,
    crypto_sign_ed25519_sk_to_curve25519,
    crypto_sign_seed_keypair,
)
from nacl.exceptions import CryptoError

from cablestore.errors import ArgumentError
from cablestore.wire.crypto import Keypair

KEY_SIZE = 32
_P = 2**255 - 19  # the field of Curve25519 and Ed25519


def x25519_of(ed25519_public_key: bytes) -> bytes:
    """The X25519 form of an Ed25519 public key; :class:`ArgumentError` for bytes that are not a usable public key."""
    if not isinstance(ed25519_public_key, (bytes, bytearray)) or len(ed25519_public_key) != KEY_SIZE:
        raise ArgumentError(f"an Ed25519 public key is {KEY_SIZE} bytes")
    try:
        return crypto_sign_ed25519_pk_to_curve25519(bytes(ed25519_public_key))
    except (CryptoError, ValueError, TypeError) as e:
        raise ArgumentError("not an Ed25519 public key of the main subgroup") from e


def x25519_private_of(keypair: Keypair) -> bytes:
    """The X25519 private key of a user's Ed25519 keypair (its public key is ``x25519_of(keypair.public_key)``)."""
    if not isinstance(keypair, Keypair):
        raise ArgumentError(f"a Keypair, not {type(keypair).__name__}")
    _, secret = crypto_sign_seed_keypair(bytes(keypair.signing_key))
    return crypto_sign_ed25519_sk_to_curve25519(secret)


def ed25519_candidates(x25519_public_key: bytes) -> tuple[bytes, ...]:
    """The Ed25519 public keys (none, or two: a point and its negation) whose X25519 form is ``x25519_public_key``."""
    if not isinstance(x25519_public_key, (bytes, bytearray)) or len(x25519_public_key) != KEY_SIZE:
        raise ArgumentError(f"an X25519 public key is {KEY_SIZE} bytes")
    u = int.from_bytes(x25519_public_key, "little") & ((1 << 255) - 1)
    if (u + 1) % _P == 0:
        return ()
    # The birational map from Montgomery u to Edwards y: y = (u - 1) / (u + 1).
    y = (u - 1) * pow(u + 1, _P - 2, _P) % _P
    out = []
    for sign in (0, 1):
        candidate = (y | (sign << 255)).to_bytes(KEY_SIZE, "little")
        try:
            if crypto_sign_ed25519_pk_to_curve25519(candidate) == bytes(x25519_public_key):
                out.append(candidate)
        except (CryptoError, ValueError, TypeError):
            pass  # not on the curve (u on the twist), or of small order
    return tuple(out)


def identify(remote_static: bytes, known: Collection[bytes] | Callable[[bytes], bool]) -> bytes | None:
    """The Ed25519 public key of a known user whose X25519 form is ``remote_static``, or None (an unknown user).

    ``known`` is a collection of Ed25519 public keys, or a function telling
    whether a key is known (a store's lookup, say): it is asked about at
    most the two candidates, never given the whole set.
    """
    is_known = known if callable(known) else known.__contains__
    for candidate in ed25519_candidates(remote_static):
        if is_known(candidate):
            return candidate
    return None
