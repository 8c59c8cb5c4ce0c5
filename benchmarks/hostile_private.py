"""Attacks on the private listener of `cablestore serve --cabal-key` (issue 39, item 6), for :mod:`benchmarks.hostile`.

The harness serves its store on a private listener and, beside it, the
plain one the good client and the older attacks use; these attacks hit the
private one (``info["private_address"]``, key ``info["cabal_key"]``).  Each
checks what it can see itself and records it in ``info["checks"]``: every
connection it breaks must be closed by the server with nothing sent back
(no wire message is read from it, and nothing is answered).
"""

from __future__ import annotations

import os
import socket
import struct
import time

from benchmarks.hostile_serve import Sockets, trickle
from cablestore.wire.handshake import CableHandshake
from cablestore.wire.noise import TAGLEN


def _closed_silently(sock: socket.socket, seconds: float, anything: bool = False) -> bool | None:
    """True: closed by the server having sent nothing (``anything``: whatever it sent); False: it sent bytes; None: still open after ``seconds``."""
    sock.settimeout(0.2)
    got, deadline = b"", time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 16)
        except TimeoutError:
            continue
        except OSError:  # reset: closed
            return anything or not got
        if not chunk:
            return anything or not got
        got += chunk
    return None


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5)


def _handshaken(address: str, key: bytes) -> tuple[socket.socket, CableHandshake]:
    """A connection through the handshake, as a member of the cabal would make it."""
    sock = _connect(address)
    hs = CableHandshake(initiator=True, cabal_key=key, now=int(time.time() * 1000))
    sock.sendall(hs.data_to_send())
    sock.settimeout(5)
    while not hs.handshake_complete:
        data = sock.recv(4096)
        hs.receive_data(data, int(time.time() * 1000))
        if not data or hs.finished:
            raise ConnectionError(f"the handshake failed: {hs.error}")
    sock.sendall(hs.data_to_send())
    return sock, hs


def _record(info: dict, name: str, outcomes: list) -> None:
    bad = [o for o in outcomes if o is not True]
    info["checks"][name] = True if outcomes and not bad else f"{len(bad)} of {len(outcomes)} not closed as they should be ({bad[:3]})"


def attack_half_open(address, size, stop, info):
    """``size`` connections to the private listener that never send a byte: held until the handshake deadline, then closed; reopened."""
    sk = Sockets(info["private_address"])
    while not stop.is_set():
        sk.open(size - len(sk.socks), stop)
        if stop.wait(0.5):
            break
        sk.pump()  # drops what the server closed
    sk.close()


def attack_slow_handshake(address, size, stop, info):
    """``size`` connections sending message 1 of the handshake one byte a second."""
    trickle(info["private_address"], size, stop, CableHandshake(initiator=True, cabal_key=info["cabal_key"], now=0).data_to_send())


def attack_garbage(address, size, stop, info):
    """Connections sending a plain Cable request, or random bytes of a handshake message's size or far more: each closed, nothing sent back."""
    outcomes, i = [], 0
    while not stop.is_set() and len(outcomes) < size:
        sock = _connect(info["private_address"])
        try:
            sock.sendall(os.urandom((48, 96, 4096, 1 << 20)[i % 4]))
        except OSError:
            pass  # closed before it was all sent: that is the point
        outcomes.append(_closed_silently(sock, 2.0))
        sock.close()
        i += 1
    _record(info, "handshake garbage: closed, nothing sent", outcomes)


def attack_after_handshake(address, size, stop, info):
    """Through the handshake with the cabal key, then a totalLen over the bound, a segment that fails its MAC, or a bare length: each closed."""
    outcomes, i = [], 0
    while not stop.is_set() and len(outcomes) < size:
        try:
            sock, hs = _handshaken(info["private_address"], info["cabal_key"])
        except OSError as exc:
            outcomes.append(f"{type(exc).__name__}: {exc}")
            continue
        kind = i % 3
        if kind == 0:  # announce 2^31 bytes: over the 4 MiB bound, refused before any of it is read
            frame = hs._tx.encrypt_with_ad(b"", struct.pack("<I", 1 << 31)) + bytes(4096)
        elif kind == 1:  # a good length, then a segment whose MAC fails
            frame = hs._tx.encrypt_with_ad(b"", struct.pack("<I", 100 + TAGLEN)) + os.urandom(100 + TAGLEN)
        else:  # a length frame that is garbage
            frame = os.urandom(4 + TAGLEN)
        try:
            sock.sendall(frame)
        except OSError:
            pass
        # closed; what came before is the server's own requests (serve pulls from every peer once its handshake is through)
        outcomes.append(_closed_silently(sock, 2.0, anything=True))
        sock.close()
        i += 1
    _record(info, "after the handshake: over-bound length, bad MAC, garbage length closed", outcomes)


PRIVATE_ATTACKS = [
    # name, function, full size, short size, issue item
    ("half-open handshakes", attack_half_open, (200, None), (100, None), "39.6"),
    ("handshake 1 byte/s", attack_slow_handshake, (200, None), (100, None), "39.6"),
    ("handshake garbage", attack_garbage, (200, None), (40, None), "39.6"),
    ("bad frames after the handshake", attack_after_handshake, (150, None), (30, None), "39.6"),
]
