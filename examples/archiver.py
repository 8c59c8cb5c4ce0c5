"""An archiver: it follows every channel of a Cable peer and keeps what arrives.

    python examples/archiver.py archive.ldb --connect 127.0.0.1:13331 --jsonl archive.jsonl

Every post the peer has, and every post it gets later, is stored in the
archiver's own store (archive.ldb, created if missing); with --jsonl each is
also appended to a file as one line of JSON (StoredPost.to_dict()).  It runs
until Ctrl-C or SIGTERM.
"""

import argparse
import asyncio
import json
import signal
import sys

from cablestore import CableError, Peer, Store
from cablestore.peer import parse_address


async def archive(store, host, port, jsonl=None):
    async with Peer(store) as peer:                # no key: this peer only reads
        async with peer.posts() as posts:          # no channel: every post, from now on
            await peer.connect(host, port, reconnect=True)  # the peer's history, then live; back by itself after a drop
            print(f"archiver: following {host}:{port}", flush=True)
            out = open(jsonl, "a", encoding="utf-8") if jsonl else None
            try:
                async for post in posts:           # the sync already stored it; we only report it
                    if out is not None:
                        out.write(json.dumps(post.to_dict()) + "\n")
                        out.flush()                # a line at a time, so the file can be read live
            finally:
                if out is not None:
                    out.close()


async def main(args):
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
    host, port = parse_address(args.connect)
    with Store(args.store) as store:
        try:
            await archive(store, host, port, args.jsonl)
        except asyncio.CancelledError:
            pass


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Follow every channel of a Cable peer and keep every post that arrives.")
    parser.add_argument("store", help="the archive's store directory (created if missing)")
    parser.add_argument("--connect", required=True, metavar="HOST:PORT", help="the peer to follow (a `cablestore serve`, say)")
    parser.add_argument("--jsonl", metavar="FILE", help="also append each post to FILE as a line of JSON")
    args = parser.parse_args()
    try:
        asyncio.run(main(args))
    except KeyboardInterrupt:
        pass
    except CableError as exc:
        sys.exit(f"archiver: {type(exc).__name__}: {exc}")
