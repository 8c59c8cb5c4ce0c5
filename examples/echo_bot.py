"""An echo bot: it follows a channel on a Cable peer and answers every `!ping` with `pong`.

    cablestore keygen bot.key                     # the bot's identity (once)
    python examples/echo_bot.py bot.ldb --key bot.key --connect 127.0.0.1:13331

It keeps its own store (bot.ldb, created if missing), catches up with the
peer once, then follows it live until Ctrl-C or SIGTERM.  docs/embedding.md
explains every line of `echo` below.
"""

import argparse
import asyncio
import signal
import sys

from cablestore import TEXT, CableError, Peer, Store
from cablestore.authoring.keyfile import read_keyfile
from cablestore.peer import parse_address


# --- the bot (docs/embedding.md shows this function) ---
async def echo(store, key, host, port, channel="general"):
    async with Peer(store, key=key) as peer:       # leaving the block stops every connection
        await peer.sync(host, port)                # catch up once: old pings stay unanswered
        async with peer.posts(channel) as posts:   # every post stored from now on, in this channel
            await peer.connect(host, port, reconnect=True)  # follow the peer live, reconnecting by itself
            await peer.join(channel)
            print(f"echo_bot: answering !ping in #{channel}", flush=True)
            async for post in posts:               # a StoredPost: post.text, post.who, post.author ...
                if post.post_type == TEXT and post.text.strip() == "!ping":
                    await peer.post_text(channel, "pong")
# --- end of the bot ---


async def main(args):
    # SIGTERM (as from `kill` or a service manager) stops the bot like Ctrl-C does.
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, asyncio.current_task().cancel)
    host, port = parse_address(args.connect)
    with Store(args.store) as store:               # we own the store: the Peer leaves it open
        try:
            await echo(store, read_keyfile(args.key), host, port, args.channel)
        except asyncio.CancelledError:
            pass                                   # stopped: the Peer closed everything on the way out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Answer every !ping in a channel of a Cable peer with pong.")
    parser.add_argument("store", help="the bot's store directory (created if missing)")
    parser.add_argument("--key", required=True, help="the bot's key file (make one with: cablestore keygen FILE)")
    parser.add_argument("--connect", required=True, metavar="HOST:PORT", help="the peer to follow (a `cablestore serve`, say)")
    parser.add_argument("--channel", default="general", help="the channel to answer in (default: general)")
    args = parser.parse_args()
    try:
        asyncio.run(main(args))
    except KeyboardInterrupt:
        pass
    except CableError as exc:                      # every refusal of cablestore is a CableError
        sys.exit(f"echo_bot: {type(exc).__name__}: {exc}")
