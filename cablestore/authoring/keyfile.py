"""Secrets on disk: a keypair per identity, and cabal keys.

Format (UTF-8 text, one ``name value`` pair per line, ``#`` comments)::

    # cablestore key file: anyone who reads it can post as you
    cablestore-keypair 1
    public-key <64 hex digits: the Ed25519 public key>
    secret-seed <64 hex digits: the Ed25519 seed the secret key derives from>

The public key is stored only to be checked against the seed, so a damaged
file is refused instead of posting under an unexpected identity.  Files are
created with mode 0600 and never overwritten; a file that is group- or
world-accessible is refused (as ssh does), as is one that is unreadable or
malformed.  Every refusal is a :class:`cablestore.errors.KeyFileError`.

A cabal key file (handshake.md: the cabal key, the Noise psk that keeps a
cabal private) is 64 hex characters and a newline, under the same rules:
created 0600 and never overwritten, refused when others can read it.  The
key is never taken on a command line or printed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from nacl.signing import SigningKey

from cablestore.errors import KeyFileError
from cablestore.wire.crypto import Keypair

FORMAT_LINE = "cablestore-keypair 1"
MAX_SIZE = 4096  # a key file is ~200 bytes; refuse to read anything large


def format_keyfile(keypair: Keypair) -> str:
    """The text of a key file holding ``keypair``."""
    return (
        "# cablestore key file: anyone who reads it can post as you\n"
        f"{FORMAT_LINE}\n"
        f"public-key {keypair.public_key.hex()}\n"
        f"secret-seed {bytes(keypair.signing_key).hex()}\n"
    )


def write_keyfile(path: str | os.PathLike, keypair: Keypair | None = None) -> Keypair:
    """Write a new key file (mode 0600) and return its keypair; an existing file is never replaced."""
    keypair = keypair or Keypair()
    _create_secret(path, format_keyfile(keypair).encode("ascii"), "a key")
    return keypair


def read_keyfile(path: str | os.PathLike) -> Keypair:
    """Load the keypair of a key file; refuse one that is unreadable, malformed or too open."""
    return _read_secret(path, "key file", lambda raw: parse_keyfile(raw, str(path)))


CABAL_KEY_SIZE = 32


def write_cabal_key(path: str | os.PathLike, key: bytes | None = None) -> bytes:
    """Write a new cabal key file (a random 32-byte key as 64 hex characters, mode 0600); never replaces a file."""
    key = os.urandom(CABAL_KEY_SIZE) if key is None else key
    if len(key) != CABAL_KEY_SIZE:
        raise KeyFileError(f"a cabal key is {CABAL_KEY_SIZE} bytes, not {len(key)}")
    _create_secret(path, key.hex().encode("ascii") + b"\n", "a cabal key")
    return key


def read_cabal_key(path: str | os.PathLike) -> bytes:
    """The 32-byte cabal key of a cabal key file; refuse one that is unreadable, malformed or too open."""
    return _read_secret(path, "cabal key file", lambda raw: _parse_cabal_key(raw, path))


def _parse_cabal_key(raw: bytes, path) -> bytes:
    try:
        text = raw.decode("ascii").strip()
        key = bytes.fromhex(text)
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != CABAL_KEY_SIZE or len(text) != 2 * CABAL_KEY_SIZE:
        raise KeyFileError(f"{path} is not a cabal key file (64 hex characters)")
    return key


def _create_secret(path, data: bytes, what: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise KeyFileError(f"{path} already exists; refusing to overwrite {what}") from exc
    except OSError as exc:
        raise KeyFileError(f"cannot create {path}: {exc.strerror or exc}") from exc
    try:
        os.fchmod(fd, 0o600)  # whatever the umask allowed
        os.write(fd, data)
        os.fsync(fd)
    except BaseException as exc:  # an error, or a signal (Ctrl-C, SIGTERM): no empty or short key file is left
        os.close(fd)
        Path(path).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise KeyFileError(f"cannot write {path}: {exc.strerror or exc}") from exc
        raise
    os.close(fd)


def _read_secret(path, what: str, parse):
    """``parse(the file's bytes)``, for a regular file of at most ``MAX_SIZE`` bytes that only its owner can access.

    A file that is not a ``what`` at all (``--key /etc/passwd``) is refused as
    such by ``parse``, before its mode is looked at: ``chmod`` would not fix it.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise KeyFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise KeyFileError(f"{what} {path} is not a regular file")
        raw = os.read(fd, MAX_SIZE + 1)
    except OSError as exc:
        raise KeyFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    if len(raw) > MAX_SIZE:
        raise KeyFileError(f"{what} {path} is larger than {MAX_SIZE} bytes: not a {what}")
    value = parse(raw)
    if info.st_mode & 0o077:
        mode = stat.S_IMODE(info.st_mode)
        raise KeyFileError(f"{what} {path} is accessible by others (mode {mode:04o}); run: chmod 600 {path}")
    return value


def parse_keyfile(raw: bytes, name: str = "key file") -> Keypair:
    """The keypair in a key file's bytes (see the module docstring for the format)."""
    try:
        lines = [ln.strip() for ln in raw.decode("ascii").splitlines()]
    except UnicodeDecodeError as exc:
        raise KeyFileError(f"{name} is not a cablestore key file (not ASCII text)") from exc
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    if not lines or lines[0] != FORMAT_LINE:
        raise KeyFileError(f"{name} is not a cablestore key file (first line must be {FORMAT_LINE!r})")
    fields = {}
    for line in lines[1:]:
        key, _, value = line.partition(" ")
        if key in fields or key not in ("public-key", "secret-seed"):
            raise KeyFileError(f"{name}: unexpected or repeated line {key!r}")
        fields[key] = value.strip()
    try:
        public, seed = bytes.fromhex(fields["public-key"]), bytes.fromhex(fields["secret-seed"])
    except (KeyError, ValueError) as exc:
        raise KeyFileError(f"{name} needs public-key and secret-seed as hex") from exc
    if len(public) != 32 or len(seed) != 32:
        raise KeyFileError(f"{name}: public-key and secret-seed must be 32 bytes (64 hex digits) each")
    keypair = Keypair(SigningKey(seed))
    if keypair.public_key != public:
        raise KeyFileError(f"{name} is damaged: its secret seed does not match its public key")
    return keypair
