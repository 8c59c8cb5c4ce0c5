"""Read-only commands that show what a store holds: ``show``, ``channels``, ``stats``, ``dump``.

None of them creates or writes anything: a path that holds no store is
refused before LevelDB is asked to open it, and a store is opened
``readonly`` (:mod:`cablestore.store.lifecycle.readonly`): nothing in its directory is
written, and it may be on read-only media.  A channel named on the command
line must exist (``show``, ``dump --channel``): an unknown name is an error,
not an empty answer.  Names and texts are printed through
:func:`cablestore.cli.args.printable`, so a name holding a newline or a bidi
override cannot break a line or reorder it.
"""

from __future__ import annotations

import sys
import unicodedata
from itertools import islice

from cablestore.cli.args import channel_name, error_line, error_message, int_at_least, json_text, open_existing, print_json, printable, require_channel
from cablestore.errors import CableError
from cablestore.progress import plural


def _cmd_show(args) -> int:
    with open_existing(args.store, readonly=True) as store:
        require_channel(store, args.channel)
        messages = store.messages(args.channel, limit=args.limit, include_hidden=args.all)[::-1]  # oldest first, as a chat window reads
        topic, members, total = store.topic(args.channel), len(store.members(args.channel)), len(store.channel_time_range(args.channel))
        shown_as = store.user_labels({m.author for m in messages})  # a name two users share gets key digits
    if args.json:
        print_json({"channel": args.channel, "topic": topic, "members": members, "messages_total": total,
                    "messages": [m.to_dict() for m in messages]})
        return 0
    shown = f"the last {len(messages)}" if len(messages) < total else f"all {total}"
    print(printable(f"#{args.channel}: {'topic ' + repr(topic) if topic else '(no topic)'}, {plural(members, 'member')}, "
                    f"{plural(total, 'message')} ({shown}, oldest first, times in UTC)"))
    names = [printable(shown_as[m.author]) for m in messages]
    width = max(map(_columns, names), default=0)
    for m, who in zip(messages, names, strict=True):
        print(f"{m.time:%Y-%m-%d %H:%M:%S}  {who}{' ' * (width - _columns(who))}  {printable(format_message(m))}")
    return 0


def _columns(text: str) -> int:
    """Terminal columns ``text`` takes: wide (CJK, emoji) characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def format_message(m) -> str:
    """A message's text (marked when hidden by moderation), or a marker for a post/delete."""
    if m.text is not None:
        return f"[hidden] {m.text}" if getattr(m, "hidden_by", None) is not None else m.text
    return f"[deleted {plural(len(m.deleted), 'post')}]"


def _cmd_channels(args) -> int:
    with open_existing(args.store, readonly=True) as store:
        channels = store.channels()
    if args.json:
        print_json({"store": str(args.store), "channels": [c.to_dict() for c in channels]})
        return 0
    names = [printable(f"#{c.spelling or c.name}") for c in channels]  # as the channel's posts spell it
    width = max(map(_columns, names), default=0)
    for c, name in zip(channels, names, strict=True):
        topic = printable(f"topic {c.topic!r}") if c.topic else "(no topic)"
        messages, members = plural(c.messages, "message", spec=">6,"), plural(c.members, "member", spec=">4,")
        print(f"{name}{' ' * (width - _columns(name))}  {messages:<15}  {members:<12}  {topic}")
    if not channels:
        print(f"no channels in {printable(str(args.store))}")
    return 0


def _cmd_stats(args) -> int:
    with open_existing(args.store, readonly=True) as store:
        stats = store.stats()
    if args.json:
        print_json(stats.to_dict())
        return 0
    print(format_stats(stats))
    return 0


def format_stats(stats) -> str:
    """The stats as lines for a person."""
    lines = [printable(f"store {stats.path}"), f"  posts:       {stats.posts:,}"]
    lines += [f"    {name:<12} {n:,}" for name, n in stats.by_type.items()]
    lines += [
        f"  channels:    {stats.channels:,}",
        f"  users:       {stats.users:,}",
        f"  tombstones:  {stats.tombstones:,}",
        f"  on disk:     {stats.bytes_on_disk:,} bytes",
        f"  hot path:    {stats.hot_path}",
    ]
    return "\n".join(lines)


def _cmd_dump(args) -> int:
    with open_existing(args.store, readonly=True) as store:
        if args.channel is not None:
            require_channel(store, args.channel)
        posts = islice(store.posts(args.channel), args.limit if 0 < args.limit <= sys.maxsize else None)
        if not args.json:
            for post in posts:
                print(json_text({**post.to_dict(), "raw": post.raw.hex()}))
            return 0
        # One JSON document, written as it is read (a store may not fit in memory twice).
        print(json_text({"store": str(args.store), "channel": args.channel, "limit": args.limit or None})[:-1] + ', "posts": [', end="")
        count = 0
        try:
            for post in posts:
                print(",\n  " if count else "\n  ", json_text({**post.to_dict(), "raw": post.raw.hex()}), sep="", end="")
                count += 1
        except CableError as exc:  # damage found part-way: the document still ends, and says so
            error = {"error": type(exc).__name__, "message": error_message(exc)}
            print(f'\n], "count": {count}, ' + json_text(error)[1:])
            print(error_line("dump", exc), file=sys.stderr)
            return 2
        print(f'\n], "count": {count}}}')
    return 0


def register(sub) -> None:
    """Add ``show``, ``channels``, ``stats`` and ``dump`` to the ``cablestore`` subcommands."""
    p = sub.add_parser("show", help="print a channel as a person reads it: time (UTC), name, text, deletions")
    p.add_argument("store", help="the store directory (read only)")
    p.add_argument("channel", type=channel_name, help="the channel name (case-insensitive, #name too; it must exist: see `cablestore channels`)")
    p.add_argument("--limit", type=int_at_least(0), default=50, help="the newest N messages (default: 50; 0: all)")
    p.add_argument("--all", action="store_true", help="also the messages hidden by moderation, marked [hidden]")
    p.add_argument("--json", action="store_true", help="print the channel and its messages as JSON")
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("channels", help="list a store's channels: messages, members, topic")
    p.add_argument("store", help="the store directory (read only)")
    p.add_argument("--json", action="store_true", help="print the channels as JSON")
    p.set_defaults(func=_cmd_channels)

    p = sub.add_parser("stats", help="count what a store holds: posts by type, channels, users, tombstones, bytes")
    p.add_argument("store", help="the store directory (read only)")
    p.add_argument("--json", action="store_true", help="print the counts as JSON")
    p.set_defaults(func=_cmd_stats)

    p = sub.add_parser("dump", help="write every post as a JSON line: decoded fields and the raw post in hex")
    p.add_argument("store", help="the store directory (read only)")
    p.add_argument("--channel", type=channel_name, default=None, help="only the posts of this channel (and the deletes listed in it); it must exist")
    p.add_argument("--limit", type=int_at_least(0), default=0, help="at most N posts, in hash order (default: 0, all)")
    p.add_argument("--json", action="store_true", help="one JSON document {store, channel, limit, posts: [...], count} instead of JSON lines")
    p.set_defaults(func=_cmd_dump)


__all__ = ["format_message", "format_stats", "register"]
