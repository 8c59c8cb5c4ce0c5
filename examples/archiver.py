"""An archiver: it follows every channel of a Cable peer and keeps what arrives.

    python examples/archiver.py archive.ldb --connect 127.0.0.1:13331 --jsonl archive.jsonl

Every post the peer has, and every post it gets later, is stored in the
archiver's own store (archive.ldb, created if missing); with --jsonl each is
also appended to a file as one line of JSON (StoredPost.to_dict()), oldest
first: a peer sends its history newest first, so the posts that arrive
together (the history, what a reconnect catches up) are sorted by time
before they are written.  It runs until Ctrl-C or SIGTERM.
"""

import argparse
import asyncio
import json
import signal
import sys

from cablestore import CableError, Peer, Store
from cablestore.peer import parse_address

BURST_GAP = 0.25     # seconds: posts arriving closer together than this are written as one burst
BURST_MAX = 10_000   # posts sorted at most at once (a longer history is written in runs of this many)


async def bursts(posts):
    """The feed's posts in bursts of those arriving together, each burst oldest first."""
    while True:
        try:
            burst = [await anext(posts)]
        except StopAsyncIteration:
            return
        while len(burst) < BURST_MAX:
            try:
                burst.append(await asyncio.wait_for(anext(posts), BURST_GAP))
            except (TimeoutError, StopAsyncIteration):
                break
        burst.sort(key=lambda post: (post.timestamp, post.hash))
        yield burst


async def archive(store, host, port, jsonl=None):
    async with Peer(store) as peer:                # no key: this peer only reads
        async with peer.posts() as posts:          # no channel: every post, from now on
            await peer.connect(host, port, reconnect=True)  # the peer's history, then live; back by itself after a drop
            print(f"archiver: following {host}:{port}", flush=True)
            out = open(jsonl, "a", encoding="utf-8") if jsonl else None
            try:
                async for burst in bursts(posts):  # the sync already stored them; we only report them
                    if out is not None:
                        out.writelines(json.dumps(post.to_dict()) + "\n" for post in burst)
                        out.flush()                # a burst at a time, so the file can be read live
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
