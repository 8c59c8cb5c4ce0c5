"""Moderation commands: ``roles``, ``users`` and ``moderation`` (read only), and ``role``, ``hide``, ``unhide``,
``drop``, ``undrop``, ``block``, ``unblock`` (write one moderation post as the key file's owner,
who is the store's local user; see cablestore.authoring.moderating)."""

from __future__ import annotations

import sys
from pathlib import Path

from cablestore.cli.args import channel_name, client_path, open_existing, print_json, printable, served_store, store_or_path
from cablestore.errors import ArgumentError
from cablestore.progress import plural

ROLE_HELP = "admin, mod or user"
USER_HELP = "a user: a public key, its first 8+ hex digits (as `users` and `show` print it) or a name only one user has"


def _cmd_roles(args) -> int:
    with open_existing(args.store, readonly=True) as store:
        roles = store.roles(args.channel)
        seeded = store.roles_from_seed(args.channel)
        names = {pk: store.name(pk) for pk in roles}
    if args.json:
        print_json({"channel": args.channel, "roles": {pk.hex(): role for pk, role in sorted(roles.items())}, "from_seed": sorted(pk.hex() for pk in seeded)})
        return 0
    where = f"#{args.channel}" if args.channel else "the cabal"
    print(f"roles in {where}: {len(roles)} (normal users not listed)")
    for pk, role in sorted(roles.items(), key=lambda kv: (kv[1] != "admin", kv[0])):
        print(f"  {role:<6} {pk.hex()}  {names[pk] or ''}{'  (from the moderation seed)' if pk in seeded else ''}".rstrip())
    return 0


def _cmd_moderation(args) -> int:
    with open_existing(args.store, readonly=True) as store:
        summary = store.moderation_summary()
        people = {bytes.fromhex(k) for table in (*summary["roles"].values(), *summary["hidden_users"].values()) for k in table}
        people |= {bytes.fromhex(k) for name in ("blocks", "unblocks", "blocked_by") for k in summary[name]}
        people |= {bytes.fromhex(summary["local_user"])} if summary["local_user"] else set()
        names = {pk: store.name(pk) for pk in people}
    if args.json:
        print_json(summary)
        return 0

    def who(keys) -> str:
        return ", ".join(describe_user(names[bytes.fromhex(k)], bytes.fromhex(k)) for k in sorted(keys, key=lambda k: (names[bytes.fromhex(k)] or "", k))) or "none"

    local = summary["local_user"]
    local_shown = describe_user(names[bytes.fromhex(local)], bytes.fromhex(local)) if local else "(none: nothing applies)"
    print(printable(f"moderation state of {args.store} for local user {local_shown}"))
    for context, table in summary["roles"].items():
        seeded = set(summary["roles_from_seed"][context])
        listed = (f"{v} {who([k])}" + (" (seed)" if k in seeded else "") for k, v in sorted(table.items()))
        print(printable(f"  roles in {_context(context)}: " + (", ".join(listed) or "none")))
    if summary["seed"]:
        print(f"  moderation seed: {plural(len(summary['seed']), 'user')} (`cablestore seed show`)")
    for context, table in summary["hidden_users"].items():
        print(printable(f"  hidden users in {_context(context)}: {who(table)}"))
    for name, title in (("blocks", "blocked"), ("unblocks", "unblocked"), ("blocked_by", "blocking the local user")):
        print(printable(f"  {title}: {who(summary[name])}"))
    print(f"  hidden posts: {len(summary['hidden_posts'])}")
    print(f"  dropped posts: {len(summary['dropped_posts'])}")
    print(printable("  dropped channels: " + (", ".join(f"#{c}" for c in sorted(summary["dropped_channels"])) or "none")))
    print(f"  moderation posts stored: {summary['moderation_posts']}")
    return 0


def _context(context: str) -> str:
    return "the whole cabal" if context in ("(cabal)", "") else f"#{context}"


def _cmd_users(args) -> int:
    with open_existing(args.store, readonly=True) as store:
        users = store.users()
    if args.json:
        print_json({"store": str(args.store), "users": [u.to_dict() for u in users]})
        return 0
    print(f"{plural(len(users), 'user')} in {args.store}")
    for u in users:
        roles = ", ".join(f"{role} in {'#' + c if c else 'the cabal'}" for c, role in sorted(u.roles.items()))
        facts = [plural(u.posts, "post"), roles, "hidden in " + ", ".join("#" + c if c else "the cabal" for c in u.hidden_in) if u.hidden_in else ""]
        facts += ["blocked" + (" (posts dropped)" if u.blocked["drop"] else "") if u.blocked else "", "declines roles" if u.accept_role == 0 else ""]
        print(printable(f"  {u.public_key.hex()}  {u.label if u.name is not None else '(no name)'}  " + "; ".join(f for f in facts if f)))
    return 0


def _confirm_channel_drop(args) -> bool:
    """A drop of a whole channel is confirmed on a terminal (or by ``--yes``): it removes the channel's posts."""
    if args.yes or args.command != "drop" or getattr(args, "post", None) or not args.channel:
        return True
    if served_store() is not None or Path(args.store, "CURRENT").is_file():
        with open_existing(args.store) as store:
            count = store.channel_post_count(args.channel)
    else:
        count = 0
    what = f"drop --channel {args.channel} removes its {plural(count, 'post')} from {args.store} and refuses new ones"
    if served_store() is not None or not sys.stdin.isatty():
        raise ArgumentError(f"{what}: pass --yes to confirm (no terminal to ask on)")
    print(f"{what} (undrop re-allows posts, it does not restore them). Drop? [y/N] ", end="", file=sys.stderr, flush=True)
    if sys.stdin.readline().strip().lower() in ("y", "yes"):
        return True
    print("not dropped", file=sys.stderr)
    return False


def _cmd_seed(args) -> int:
    with open_existing(args.store, readonly=args.seed_command == "show") as store:
        if args.seed_command == "set":
            try:
                data = bytes.fromhex(args.seed)
            except ValueError:
                raise ArgumentError("seed set: the seed is hex: <varint role><32-byte public key> pairs (moderation.md §4.7)") from None
            store.set_seed(data)
        elif args.seed_command == "clear":
            store.clear_seed()
        seed = store.seed()
    if args.json:
        print_json({"seed": {pk.hex(): role for pk, role in sorted(seed.items())}})
    elif not seed:
        print("no moderation seed" + (": cleared (what its users did that was applied stays applied)" if args.seed_command == "clear" else ""))
    else:
        print(f"moderation seed: {plural(len(seed), 'user')} with these roles by default (no post/role is written; `cablestore seed clear` revokes it)")
        for pk, role in sorted(seed.items()):
            print(f"  {role:<6} {pk.hex()}")
    return 0


def _looked_up(args, specs: list) -> tuple[list[bytes], dict, bytes | None, dict]:
    """The users ``specs`` name (:meth:`cablestore.Store.resolve_user`: a key, an 8+ digit prefix or a name), how people
    see them (``name [1a2b3c4d]``), the store's local user and each user's post count: what a moderation command reports on.

    A store not made yet (the command makes it) names users by full keys only.
    """
    from cablestore.keyspace.keys import as_hash

    if served_store() is None and not Path(args.store, "CURRENT").is_file():
        keys = [as_hash(s) for s in specs]
        return keys, {k: k.hex()[:8] for k in keys}, None, {}
    with open_existing(args.store, readonly=True) as store:
        keys = [store.resolve_user(s) for s in specs]
        names = {k: store.name(k) for k in keys}
        counts = {k: len(store.author_posts(k)) for k in keys} if args.command == "block" else {}
        return keys, {k: describe_user(names[k], k) for k in keys}, store.local_user, counts


def describe_user(name: str | None, key: bytes) -> str:
    """A user as every command prints one: ``name [1a2b3c4d]`` (``(no name) [1a2b3c4d]`` without one)."""
    return printable(f"{name or '(no name)'} [{key.hex()[:8]}]")


_DONE = {"role": "", "hide": "hid", "unhide": "unhid", "drop": "dropped", "undrop": "undropped", "block": "blocked", "unblock": "unblocked"}


def _what_was_done(args, keys, shown, counts_before, posts) -> str:
    """What a moderation command did, in one line: ``blocked mallory [1a2b3c4d]: 113 posts dropped``."""
    where = f"in #{args.channel}" if args.channel else "in the whole cabal"
    who = ", ".join(shown[k] for k in keys)
    if args.command == "role":
        role = {"admin": "an admin", "mod": "a mod", "user": "a normal user (no role)"}[args.role]
        return f"{who} is now {role} {where}"
    verb = _DONE[args.command]
    if posts:
        return f"{verb} {plural(len(posts), 'post')} {where}" if args.command in ("hide", "unhide") else f"{verb} {plural(len(posts), 'post')}"
    if not keys:  # a drop or undrop of a channel
        return f"{verb} #{args.channel}" + (": its posts are removed and new ones refused" if args.command == "drop" else ": new posts may be stored again")
    if args.command == "block":
        with open_existing(args.store, readonly=True) as store:
            gone = sum(counts_before.get(k, 0) - len(store.author_posts(k)) for k in keys)
        extra = [f"{plural(gone, 'post')} dropped"] if args.drop else []
        extra += ["the block is sent to them"] if args.notify else []
        return f"{verb} {who}" + (f": {', '.join(extra)}" if extra else "")
    if args.command == "unblock":
        return f"{verb} {who}" + (": their dropped posts may be stored again" if args.undrop else "")
    return f"{verb} {who} {where}"


def _cmd_write(args) -> int:
    from cablestore.authoring.moderating import moderate_with_keyfile
    from cablestore.wire.codec import post_hash

    posts = getattr(args, "post", None)
    specs = list(args.targets) + list(getattr(args, "user", None) or [])
    if posts and specs:
        raise ArgumentError(f"{args.command}: give USERs or --post HASHes, not both")
    if not _confirm_channel_drop(args):
        return 1
    keys, shown, local_before, counts = _looked_up(args, specs)
    buf = moderate_with_keyfile(
        store_or_path(args.store), client_path(args.key), args.command, posts or [k.hex() for k in keys],
        role=getattr(args, "role", None), posts=bool(posts), channel=args.channel or "",
        reason=args.reason, private=args.private, drop=getattr(args, "drop", False),
        notify=getattr(args, "notify", False), undrop=getattr(args, "undrop", False),
    )
    h = post_hash(buf)
    if not args.json:
        print(_what_was_done(args, keys, shown, counts, posts))
        if local_before is None:
            print("this key's owner is now the store's local user (the root of its moderation)")
        print(f"  moderation post {h.hex()}")
        return 0
    with open_existing(args.store) as store:
        post = store.post(h)
    print_json({**post.to_dict(), "raw": post.raw.hex()})
    return 0


def register(sub) -> None:
    """Add the moderation commands to the ``cablestore`` parser's subparsers."""
    p = sub.add_parser("roles", help="the admins and mods the store's local user recognises (read only)")
    p.add_argument("store", help="the store directory (read only)")
    p.add_argument("--channel", type=channel_name, default=None, help="in this channel (default: the whole cabal)")
    p.add_argument("--json", action="store_true", help="print the roles as JSON")
    p.set_defaults(func=_cmd_roles)

    p = sub.add_parser("users", help="every known user: key, name, roles, hidden or blocked, post count (read only)")
    p.add_argument("store", help="the store directory (read only)")
    p.add_argument("--json", action="store_true", help="print the users as JSON")
    p.set_defaults(func=_cmd_users)
    p = sub.add_parser("seed", help="the moderation seed: users to regard as admins or mods by default (moderation.md §4.7)")
    seeds = p.add_subparsers(dest="seed_command", required=True, metavar="COMMAND")
    k = seeds.add_parser("set", help="join with a seed: hex of <varint role><32-byte key> pairs (0 admin, 1 mod; at most 16); replaces one set before")
    k.add_argument("store", help="the store directory")
    k.add_argument("seed", help="the seed as hex (roles numbered as moderation.md §5.1.2: 0 admin, 1 mod, 2 user)")
    k.add_argument("--json", action="store_true", help="print the seed as JSON")
    k.set_defaults(func=_cmd_seed)
    for name, text in (("show", "the seed in effect (read only)"), ("clear", "revoke the seed: its users are normal users again; what they did stays applied")):
        k = seeds.add_parser(name, help=text)
        k.add_argument("store", help="the store directory")
        k.add_argument("--json", action="store_true", help="print the seed as JSON")
        k.set_defaults(func=_cmd_seed)

    p = sub.add_parser("moderation", help="the resolved moderation state: roles, hides, drops, blocks (read only)")
    p.add_argument("store", help="the store directory (read only)")
    p.add_argument("--json", action="store_true", help="print the whole state as JSON")
    p.set_defaults(func=_cmd_moderation)

    texts = {
        "role": "set a user's role (admin, mod, user) as the key file's owner",
        "hide": "hide users (or --post posts) in --channel or the whole cabal",
        "unhide": "undo a hide of users (or --post posts)",
        "drop": "drop posts (--post HASH...) or a whole --channel: removed from the store (undrop re-allows posts, it does not restore them)",
        "undrop": "undo a drop of posts (--post) or of a --channel: posts may be stored again when offered; removed ones are not restored",
        "block": "block users: their new posts are refused (--drop removes their stored posts)",
        "unblock": "undo a block (--undrop lets their dropped posts be stored again)",
    }
    for name, text in texts.items():
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("store", help="the store directory (created if missing; the key's owner becomes its local user)")
        p.add_argument("--key", required=True, metavar="KEYFILE", help="the key file of the local user (see `cablestore keygen`)")
        if name == "role":
            p.add_argument("targets", nargs=1, metavar="USER", help=USER_HELP)
            p.add_argument("role", choices=("admin", "mod", "user"), help=ROLE_HELP)
        elif name in ("drop", "undrop"):
            p.set_defaults(targets=[])
        else:
            p.add_argument("targets", nargs="*", metavar="USER", help=f"{USER_HELP}; 1 to 16")
            p.add_argument("--user", action="extend", nargs="+", default=[], metavar="PUBKEY", help="the same as USER (users may come here too)")
        if name in ("hide", "unhide", "drop", "undrop"):
            p.add_argument("--post", nargs="+", default=None, metavar="HASH", help="act on these posts (hashes in hex)")
        p.add_argument(
            "--channel", type=channel_name, default=None,
            help="refused: blocks act in the whole cabal" if name in ("block", "unblock") else "the channel context (default: the whole cabal)",
        )
        p.add_argument("--reason", default="", help="why (shown to others; at most 128 characters)")
        p.add_argument("--private", action="store_true", help="privacy=1: kept in this store, never sent to peers")
        if name == "drop":
            p.add_argument("--yes", action="store_true", help="drop a --channel without asking (it asks on a terminal, and is refused elsewhere)")
        else:
            p.set_defaults(yes=False)
        if name == "block":
            p.add_argument("--drop", action="store_true", help="remove their stored posts too")
            p.add_argument("--notify", action="store_true", help="send the block to the blocked users")
        if name == "unblock":
            p.add_argument("--undrop", action="store_true", help="let their dropped posts be stored again")
        p.add_argument("--json", action="store_true", help="print the post as JSON")
        p.set_defaults(func=_cmd_write)
