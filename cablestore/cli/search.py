"""``search``: find posts in a store by their words (the library's :meth:`cablestore.Store.search`).

Thin: parse, one library call, print.  A terminal sees the matched spans in
bold; a pipe or ``--json`` gets plain text.  ``--enable`` builds the index a
store keeps from then on (``Store.enable_search``).  On a store ``serve``
holds, it runs through the control socket like ``show``.
"""

from __future__ import annotations

import argparse
import sys

from cablestore.cli.args import channel_name, int_at_least, open_existing, print_json, printable, require_channel
from cablestore.errors import ArgumentError
from cablestore.search import query as query_module
from cablestore.search.query import marked

BOLD, PLAIN = "\x1b[1m", "\x1b[0m"


def highlighted(text: str, spans, bold: bool) -> str:
    """``text`` made printable on one line, with ``spans`` in bold when ``bold``."""
    if not bold or not spans:
        return printable(text)
    return "".join(BOLD + printable(piece) + PLAIN if matched else printable(piece) for piece, matched in marked(text, spans))


def named_once(store, query: str, channel: str | None) -> None:
    """Refuse what a person surely mistyped: an ``in:`` (or ``--channel``) the store holds no channel of
    (:class:`cablestore.errors.ChannelNotFoundError`), a ``from:`` naming no user or several
    (:meth:`cablestore.Store.resolve_user`: a key, an 8+ digit prefix or a name only one user has)."""
    q = query_module.parse(query)
    for name in {c for c in (channel, q.channel) if c is not None}:
        require_channel(store, name)
    for who in q.authors:
        store.resolve_user(who)


def _cmd_search(args) -> int:
    args.query = " ".join(args.query) if args.query else None
    if args.query is None and not args.enable:
        raise ArgumentError("search: give a QUERY (or --enable to build the index)")
    with open_existing(args.store, readonly=not args.enable) as store:
        built = store.enable_search() if args.enable else None
        if args.query is None:
            if args.json:
                print_json({"store": str(args.store), "search": True, "written": built})
            else:
                print(printable(f"search index of {args.store}: on ({built:,} entries written)" if built else f"search index of {args.store}: on"))
            return 0
        named_once(store, args.query, args.channel)
        page = store.search(args.query, channel=args.channel, limit=args.limit, include_hidden=args.include_hidden, cursor=args.cursor)
    if args.json:
        print_json({"query": args.query, "hits": [h.to_dict() for h in page], "next": page.next})
        return 0
    bold = sys.stdout.isatty()
    for hit in page:
        mark = "[hidden] " if hit.hidden_by is not None else ""
        kind = "topic: " if hit.text is None else ""
        where = printable(f"#{hit.channel}") if hit.channel is not None else ""
        who = printable(f"{hit.author_name or '(no name)'} [{hit.author.hex()[:8]}]")  # as `show` and the web name people
        print(f"{hit.time:%Y-%m-%d %H:%M:%S}  {where}  {who}  {mark}{kind}{highlighted(hit.searched, hit.spans, bold)}")
    if not page:
        print("no posts match")
    elif page.next is not None:
        print(f"more: --cursor {page.next}")
    return 0


def register(sub) -> None:
    """Add ``search`` to the ``cablestore`` subcommands."""
    syntax = getattr(query_module, "SYNTAX", "")
    p = sub.add_parser(
        "search",
        help="find posts by their words: newest first, matches in bold",
        description="Find post/texts and post/topics by their words, newest first (a store keeps the index once --enable built it).",
        epilog=("the query language:\n" + syntax) if syntax else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        free_words=True,  # search STORE cable -tea: -tea is an exclusion, not an option
    )
    p.add_argument("store", help="the store directory (read only, but with --enable)")
    p.add_argument("query", nargs="*", help="what to find (see the query language below; its words may be one argument or several)")
    p.add_argument("--channel", type=channel_name, default=None, help="only in this channel (as in:CHANNEL; #CHANNEL too)")
    p.add_argument("--limit", type=int_at_least(1), default=50, help="at most N posts (default: 50, at most 1000)")
    p.add_argument("--include-hidden", action="store_true", help="also posts hidden by moderation, marked [hidden]")
    p.add_argument("--cursor", default=None, help="go on after a previous search (the cursor it printed after `more:`)")
    p.add_argument("--enable", action="store_true", help="build the store's search index (kept from then on by every write)")
    p.add_argument("--json", action="store_true", help="print the hits, their spans and the next cursor as JSON")
    p.set_defaults(func=_cmd_search)


__all__ = ["highlighted", "named_once", "register"]
