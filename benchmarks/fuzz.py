"""A long fuzz run of the decoders: mutated vectors (posts 0-9, messages 0-8), mutated generated posts, random bytes.

    python -m benchmarks.fuzz --inputs 1000000

Every input must either decode to a post that re-encodes to exactly the same
bytes, or raise a CableError subclass; ``verify_post`` must never raise.  One
input in five is a mutated wire message (the moderation state request
among them), which must decode to a message that re-encodes to the same
bytes or raise a CableError.
Anything else is printed (hex) and makes the exit status 1.  The test suite
runs the same checks with hypothesis (tests/test_codec.py, test_hostile_ingest.py).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

from cablestore import decode_post, encode_post, verify_post
from cablestore.authoring.workload import generate
from cablestore.errors import CableError
from cablestore.wire.decoding import decode
from cablestore.wire.messages import encode

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
VECTORS = [DATA / "cable-js-0.2.1.json", DATA / "cable-js-0.2.1-moderation.json", DATA / "cable-js-0.2.1-generated.json"]


def _binaries() -> dict[str, bytes]:
    out = {}
    for path in VECTORS:
        out.update({k: bytes.fromhex(v) for k, v in json.loads(path.read_text()).items() if k.endswith(" binary")})
    return out


def seeds() -> list[bytes]:
    """Posts: every post vector (types 0-9) and 300 generated posts."""
    posts = [v for k, v in _binaries().items() if "post" in k and "request" not in k and "response" not in k]
    return posts + generate(seed=99, posts=300)


def message_seeds() -> list[bytes]:
    """Messages: every message vector (types 0-8)."""
    return [v for k, v in _binaries().items() if "request" in k or "response" in k]


def check_message(buf: bytes, outcomes: Counter) -> str | None:
    try:
        m = decode(buf)
    except CableError as exc:
        outcomes["message " + type(exc).__name__] += 1
        return None
    except Exception as exc:  # noqa: BLE001 - this is what we hunt for
        return f"message: {type(exc).__name__}: {exc}"
    if encode(m) != buf:
        return "message decoded but re-encodes differently"
    outcomes[f"message type {m.msg_type}"] += 1
    return None


def mutate(buf: bytes, rng: random.Random) -> bytes:
    b = bytearray(buf)
    for _ in range(rng.choice((1, 1, 1, 2, 3, 8))):
        op = rng.randrange(6)
        i = rng.randrange(len(b)) if b else 0
        if op == 0 and b:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            b[i] = rng.choice((0x00, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        elif op == 2:
            del b[i:]
        elif op == 3:
            b[i:i] = rng.randbytes(rng.randrange(1, 12))
        elif op == 4 and b:
            del b[i : i + rng.randrange(1, 12)]
        else:
            b[i:i] = b"\xff" * rng.randrange(1, 12)  # long varints
    return bytes(b)


def check_one(buf: bytes, outcomes: Counter) -> str | None:
    try:
        post = decode_post(buf)
    except CableError as exc:
        outcomes[type(exc).__name__] += 1
        return None
    except Exception as exc:  # noqa: BLE001 - this is what we hunt for
        return f"{type(exc).__name__}: {exc}"
    if encode_post(post) != buf:
        return "decoded but re-encodes differently"
    try:
        outcomes["valid signature" if verify_post(buf) else "decoded, bad signature"] += 1
    except Exception as exc:  # noqa: BLE001
        return f"verify_post raised {type(exc).__name__}: {exc}"
    return None


def run(inputs: int, seed: int = 1) -> dict:
    rng = random.Random(seed)
    corpus, messages = seeds(), message_seeds()
    outcomes: Counter = Counter()
    failures = []
    start = time.perf_counter()
    for n in range(inputs):
        if n % 5 == 4:
            buf = mutate(rng.choice(messages), rng)
            problem = check_message(buf, outcomes)
        else:
            buf = rng.randbytes(rng.randrange(0, 300)) if n % 10 == 8 else mutate(rng.choice(corpus), rng)
            problem = check_one(buf, outcomes)
        if problem:
            failures.append({"input": buf.hex(), "problem": problem})
    return {
        "inputs": inputs,
        "seconds": round(time.perf_counter() - start, 1),
        "failures": failures[:20],
        "failure_count": len(failures),
        "outcomes": dict(outcomes.most_common()),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    result = run(args.inputs, args.seed)
    print(json.dumps(result, indent=2))
    return 1 if result["failure_count"] else 0


if __name__ == "__main__":
    sys.exit(main())
