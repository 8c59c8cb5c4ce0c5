"""Handshakes per second and CPU per handshake with 1, 10, 100 and 1,000 cabals on one listener.

``python -m benchmarks.handshakes [--rounds N]``: the responder's side of
complete Cable Handshakes (message 1 tried against every cabal's
precomputed state, then the two Diffie-Hellman messages), in process, with
the initiator holding the last cabal's key (the worst case for the spec's
prologue) and, separately, a key no cabal holds (every try fails).  CPU is
the process time of the responder's calls only.
"""

from __future__ import annotations

import argparse
import os
import time

from cablestore.wire.crypto import Keypair
from cablestore.wire.handshake import CableHandshake
from cablestore.wire.responder import ResponderKeys


def measure(cabals: int, rounds: int) -> dict:
    keys = [os.urandom(32) for _ in range(cabals)]
    responder_keys = ResponderKeys(keys)
    server, client = Keypair(), Keypair()
    cpu = wrong_cpu = 0.0
    wall = time.perf_counter()
    for i in range(rounds):
        key = keys[-1] if i % 2 == 0 else os.urandom(32)
        init = CableHandshake(initiator=True, cabal_key=key, now=0, keypair=client)
        m1 = init.data_to_send()
        t = time.process_time()
        resp = CableHandshake(initiator=False, cabal_key=None, responder_keys=responder_keys, now=0, keypair=server)
        resp.receive_data(m1, 0)
        m2 = resp.data_to_send()
        spent = time.process_time() - t
        if i % 2:
            wrong_cpu += spent
            continue
        init.receive_data(m2, 0)
        t = time.process_time()
        resp.receive_data(init.data_to_send(), 0)
        cpu += spent + time.process_time() - t
        assert resp.handshake_complete and resp.cabal == cabals - 1
    half = rounds // 2
    return {
        "cabals": cabals, "cpu_ms_per_handshake": round(cpu / half * 1000, 3), "handshakes_per_s": round(half / cpu),
        "cpu_ms_per_wrong_key": round(wrong_cpu / half * 1000, 3), "wall_s": round(time.perf_counter() - wall, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    base = None
    for n in (1, 10, 100, 1000):
        row = measure(n, args.rounds)
        base = base or row["cpu_ms_per_handshake"]
        row["extra_ms_vs_one"] = round(row["cpu_ms_per_handshake"] - base, 3)
        print(row, flush=True)


if __name__ == "__main__":
    main()
