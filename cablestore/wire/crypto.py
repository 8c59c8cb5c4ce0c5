"""Ed25519 signing and verification of Cable posts (through pynacl/libsodium)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError, CryptoError
from nacl.signing import SigningKey

from cablestore.compiled import signatures as _signatures
from cablestore.errors import ArgumentError, PostFieldError, SignatureError
from cablestore.wire.codec import ACCEPT_ROLE, BODY_FIELD_NAMES, HEADER_FIXED, PUBLIC_KEY_SIZE, Post, decode_post, encode_body, encode_post
from cablestore.wire.fields import accept_role_text
from cablestore.workers import WorkerPool

_BODY_NAMES = set(BODY_FIELD_NAMES)
SEED_SIZE = 32  # an Ed25519 seed


def _verify_detached(public_key: bytes, message: bytes, signature: bytes) -> bool:
    try:
        crypto_sign_open(signature + message, public_key)
        return True
    except (BadSignatureError, CryptoError, ValueError, TypeError):
        return False


class Keypair:
    """An Ed25519 keypair; ``Keypair.from_seed`` makes deterministic ones for tests."""

    def __init__(self, signing_key: SigningKey | None = None) -> None:
        self.signing_key = signing_key or SigningKey.generate()
        self.public_key = bytes(self.signing_key.verify_key)

    @classmethod
    def from_seed(cls, seed: bytes) -> Keypair:
        """The keypair of a 32-byte Ed25519 seed (the same seed, the same keys); anything else raises :class:`ArgumentError`."""
        if not isinstance(seed, (bytes, bytearray, memoryview)):
            raise ArgumentError(f"a seed is {SEED_SIZE} bytes, not {type(seed).__name__}")
        if len(seed) != SEED_SIZE:
            raise ArgumentError(f"a seed is {SEED_SIZE} bytes, got {len(seed)}")
        return cls(SigningKey(bytes(seed)))

    def sign(self, message: bytes) -> bytes:
        """The 64-byte Ed25519 signature of ``message``."""
        return self.signing_key.sign(message).signature

    def __repr__(self) -> str:
        # Never the secret key: reprs end up in logs and tracebacks.
        return f"Keypair(public_key={self.public_key.hex()})"


def verify_post(buf: bytes) -> bool:
    """True when the signature covers every byte after it and matches the public key."""
    if len(buf) < HEADER_FIXED:
        return False
    return _verify_detached(bytes(buf[:PUBLIC_KEY_SIZE]), bytes(buf[HEADER_FIXED:]), bytes(buf[PUBLIC_KEY_SIZE:HEADER_FIXED]))


_CHUNK = 128


def _sign_open_address() -> int | None:
    """The address of the ``crypto_sign_open`` of the libsodium pynacl carries, when the compiled checker is built.

    Through the function pointer pynacl's cffi module gives: one libsodium,
    one verdict.  Only that private module (``nacl._sodium``) gives a C
    function's address; the public ``nacl.bindings`` are Python functions,
    which the GIL-free checker cannot call.  Anything unexpected there
    leaves the pure path.
    """
    if _signatures is None:
        return None
    try:
        from nacl._sodium import ffi, lib

        return int(ffi.cast("uintptr_t", ffi.addressof(lib, "crypto_sign_open")))
    except (ImportError, AttributeError, TypeError, ValueError):
        return None


_SIGN_OPEN = _sign_open_address()
THREADED: bool = _SIGN_OPEN is not None
"""True when batches verify without the GIL (cablestore._signatures), so :func:`verify_pool` hands out threads."""


def _batch(bufs):
    return _signatures.Batch([b if type(b) is bytes else bytes(b) for b in bufs], _SIGN_OPEN)


def _verify_chunk(bufs) -> list[bool]:
    if THREADED:
        return _batch(bufs).verdicts_list()
    return [verify_post(b) for b in bufs]


class VerifyThreads(ThreadPoolExecutor):
    """The threads :func:`verify_pool` hands out with the compiled checker: ``workers`` of them."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers, thread_name_prefix="cablestore-verify")
        self.workers = workers

    @property
    def running(self) -> int:
        """How many of its threads are alive (0 once shut down)."""
        return sum(t.is_alive() for t in self._threads)


def verify_pool(workers: int) -> WorkerPool | VerifyThreads:
    """Workers for :func:`verify_many`; the caller shuts them down.

    Threads when the compiled checker is built (:data:`THREADED`): they
    verify a shared batch with the GIL released
    (:class:`cablestore._signatures.Batch`) on other cores while the
    indexing thread runs Python, with nothing pickled; the thread consuming
    the verdicts checks posts too when it gets ahead.  Otherwise
    processes: new interpreters, not forks (forking a process that has
    LevelDB open is unsafe), that never import the main script
    (:class:`cablestore.workers.WorkerPool`): a script without the
    ``if __name__ == "__main__":`` guard is not run again in them.
    """
    if not isinstance(workers, int) or workers < 1:
        raise ArgumentError(f"a pool needs at least one worker, got {workers!r}")
    if THREADED:
        return VerifyThreads(workers)
    return WorkerPool(workers)


def verify_many(bufs: Sequence[bytes], pool: WorkerPool | VerifyThreads | None = None) -> Iterator[bool]:
    """Verify posts; return an iterator of results in order.

    With a ``pool`` and enough posts, its workers verify while the caller
    consumes the results of the posts already checked.  (pynacl's own calls
    in threads do not help: the GIL hand-off after every libsodium call
    slows the indexing thread more than the parallel verify gains; hence
    processes when the compiled checker is missing.)
    """
    if pool is None:
        return iter(_verify_chunk(bufs))
    if isinstance(pool, VerifyThreads):
        batch = _batch(bufs)
        try:
            for _ in range(pool.workers):
                pool.submit(batch.work)  # each holds the batch until it is done with it
        except RuntimeError:  # shut down: this thread checks them all
            pass
        return map(batch.valid, range(len(batch)))
    if len(bufs) < 4 * _CHUNK:
        return iter(_verify_chunk(bufs))
    chunks = [bufs[i : i + _CHUNK] for i in range(0, len(bufs), _CHUNK)]
    try:
        results = pool.map(_verify_chunk, chunks)
    except (OSError, RuntimeError, BrokenProcessPool):
        return iter(_verify_chunk(bufs))
    return _consume(results, chunks)


def _consume(results, chunks):
    done = 0
    try:
        for chunk_results in results:
            done += 1
            yield from chunk_results
    except BrokenProcessPool:  # a worker died: finish the batch here
        for chunk in chunks[done:]:
            yield from _verify_chunk(chunk)


def check_signature(buf: bytes) -> None:
    """Raise :class:`SignatureError` unless :func:`verify_post` holds."""
    if not verify_post(buf):
        raise SignatureError("Ed25519 signature does not verify")


def sign_post(post: Post, keypair: Keypair) -> bytes:
    """Return the encoded post, authored and signed by ``keypair``.

    The post's ``public_key`` and ``signature`` fields are replaced.
    """
    unsigned = dataclasses.replace(post, public_key=keypair.public_key, signature=bytes(64))
    signature = keypair.sign(encode_body(unsigned))
    return encode_post(dataclasses.replace(unsigned, signature=signature))


def body_fields(body: dict) -> dict:
    """Check a post body's field names; lists become the tuples a Post holds."""
    unknown = set(body) - _BODY_NAMES
    if unknown:
        raise PostFieldError(f"no post field named {', '.join(sorted(unknown))}")
    out = dict(body)
    for name in ("hashes", "recipients"):
        if isinstance(out.get(name), list):
            out[name] = tuple(out[name])
    if isinstance(out.get("info"), (list, tuple)):  # accept-role given as 0/1/True/False: its one-byte value
        out["info"] = tuple(
            (p[0], accept_role_text(p[1])) if isinstance(p, (list, tuple)) and len(p) == 2 and p[0] == ACCEPT_ROLE else tuple(p) if isinstance(p, list) else p
            for p in out["info"]
        )
    return out


def make_post(keypair: Keypair, post_type: int, timestamp: int, links: Iterable[bytes] = (), **body: Any) -> tuple[bytes, Post]:
    """Build, sign and encode a post; return ``(bytes, decoded post)``.

    A missing or mistyped field raises :class:`PostFieldError`, a value out
    of the spec's limits :class:`LimitError` (both :class:`CableError`).
    """
    if isinstance(links, (bytes, str)) or not hasattr(links, "__iter__"):
        raise PostFieldError(f"links must be a list of 32-byte hashes, got {type(links).__name__}")
    draft = Post(keypair.public_key, bytes(64), tuple(links), post_type, timestamp, **body_fields(body))
    buf = sign_post(draft, keypair)
    return buf, decode_post(buf)
