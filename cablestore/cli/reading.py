"""Read-only commands that show what a store holds: ``show``, ``stats``, ``dump``.

None of them creates or writes anything: a path that holds no store is
refused before LevelDB is asked to open it.
"""

from __future__ import annotations

import json
import unicodedata

from cablestore.cli.args import int_at_least, open_existing
from cablestore.errors import QueryError
from cablestore.keyspace.keys import canonical_channel


def _cmd_show(args) -> int:
    with open_existing(args.store) as store:
        known = store.channel_list()
        if canonical_channel(args.channel) not in known:
            raise QueryError(f"no channel {args.channel!r} in {args.store} (channels: {', '.join(known) or 'none'})")
        messages = store.messages(args.channel, limit=args.limit)[::-1]  # oldest first, as a chat window reads
        topic, members, total = store.topic(args.channel), len(store.members(args.channel)), len(store.channel_time_range(args.channel))
    if args.json:
        data = {"channel": args.channel, "topic": topic, "members": members, "messages_total": total,
                "messages": [m.to_dict() for m in messages]}
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return 0
    shown = f"the last {len(messages)}" if len(messages) < total else f"all {total}"
    print(f"#{args.channel}: {'topic ' + repr(topic) if topic else '(no topic)'}, {members} members, "
          f"{total} messages ({shown}, oldest first)")
    width = max((_columns(m.who) for m in messages), default=0)
    for m in messages:
        print(f"{m.time:%Y-%m-%d %H:%M:%S}  {m.who}{' ' * (width - _columns(m.who))}  {format_message(m)}")
    return 0


def _columns(text: str) -> int:
    """Terminal columns ``text`` takes: wide (CJK, emoji) characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def format_message(m) -> str:
    """A message's text, or a marker for a post/delete."""
    if m.text is not None:
        return m.text
    n = len(m.deleted)
    return f"[deleted {n} post{'s' if n != 1 else ''}]"


def _cmd_stats(args) -> int:
    with open_existing(args.store) as store:
        stats = store.stats()
    if args.json:
        print(json.dumps(stats.to_dict(), indent=2, sort_keys=True))
        return 0
    print(format_stats(stats))
    return 0


def format_stats(stats) -> str:
    """The stats as lines for a person."""
    lines = [f"store {stats.path}", f"  posts:       {stats.posts:,}"]
    lines += [f"    {name:<12} {n:,}" for name, n in stats.by_type.items()]
    lines += [
        f"  channels:    {stats.channels:,}",
        f"  users:       {stats.users:,}",
        f"  tombstones:  {stats.tombstones:,}",
        f"  on disk:     {stats.bytes_on_disk:,} bytes",
    ]
    return "\n".join(lines)


def _cmd_dump(args) -> int:
    with open_existing(args.store) as store:
        for post in store.posts(args.channel):
            print(json.dumps({**post.to_dict(), "raw": post.raw.hex()}, ensure_ascii=False))
    return 0


def register(sub) -> None:
    """Add ``show``, ``stats`` and ``dump`` to the ``cablestore`` subcommands."""
    p = sub.add_parser("show", help="print a channel as a person reads it: time, name, text, deletions")
    p.add_argument("store", help="the store directory (read only)")
    p.add_argument("channel", help="the channel name (case-insensitive)")
    p.add_argument("--limit", type=int_at_least(0), default=50, help="the newest N messages (default: 50; 0: all)")
    p.add_argument("--json", action="store_true", help="print the channel and its messages as JSON")
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("stats", help="count what a store holds: posts by type, channels, users, tombstones, bytes")
    p.add_argument("store", help="the store directory (read only)")
    p.add_argument("--json", action="store_true", help="print the counts as JSON")
    p.set_defaults(func=_cmd_stats)

    p = sub.add_parser("dump", help="write every post as a JSON line: decoded fields and the raw post in hex")
    p.add_argument("store", help="the store directory (read only)")
    p.add_argument("--channel", default=None, help="only the posts of this channel (and the deletes listed in it)")
    p.set_defaults(func=_cmd_dump)


__all__ = ["format_message", "format_stats", "open_existing", "register"]
