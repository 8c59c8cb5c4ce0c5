"""CLI for authoring: ``keygen``, ``cabal new``, ``post`` and ``heads`` (see cablestore.authoring.author)."""

from __future__ import annotations

import argparse

from cablestore.cli.args import (
    add_local_user_flag,
    channel_name,
    client_path,
    joined,
    open_existing,
    print_json,
    printable,
    require_channel,
    require_store,
    served_store,
    store_or_path,
)
from cablestore.errors import ArgumentError
from cablestore.progress import plural


def _cmd_keygen(args) -> int:
    from cablestore.authoring.keyfile import write_keyfile

    keypair = write_keyfile(args.keyfile)
    if args.json:
        print_json({"public_key": keypair.public_key.hex(), "keyfile": args.keyfile})
    else:
        print(f"public key: {keypair.public_key.hex()}")
        print(f"secret key written to {args.keyfile} (mode 0600): keep it private; give it to post, serve and the moderation commands with --key")
    return 0


def _cmd_cabal_new(args) -> int:
    from cablestore.authoring.keyfile import write_cabal_key

    write_cabal_key(args.file)  # the key is never printed
    print_json({"cabal_key_file": args.file}) if args.json else print(f"wrote a new cabal key to {args.file} (mode 0600): share it only with the cabal's members")
    return 0


def _cmd_post(args) -> int:
    from cablestore.authoring.author import post_with_keyfile
    from cablestore.wire.codec import decode_post, post_hash

    if args.key is None:
        raise ArgumentError("post needs --key KEYFILE: the key file of the post's author (see `cablestore keygen`)")
    values = args.hashes if args.kind == "delete" else [joined(getattr(args, name)) if name in FREE_TEXT else getattr(args, name) for name in args.fields]
    if args.kind == "delete" and served_store() is None:  # a delete needs the posts: refuse a missing store as every command does
        require_store(args.store)
    buf = post_with_keyfile(
        store_or_path(args.store), client_path(args.key), args.kind, values, local_user=args.local_user, exact_channel=args.exact_channel
    )
    if not args.json:
        print(posted(decode_post(buf), post_hash(buf)))
        return 0
    with open_existing(args.store) as store:  # the post as `dump` and `show --json` spell it
        post = store.post(post_hash(buf))
    print_json({**post.to_dict(), "raw": post.raw.hex()})
    return 0


def posted(post, h: bytes) -> str:
    """What ``post`` prints: the post's type and hash, and its channel or what it sets (``--json``: the post itself)."""
    from cablestore.wire.codec import POST_TYPE_NAMES

    said = f"posted {POST_TYPE_NAMES[post.post_type]} {h.hex()}"
    if post.channel is not None:
        return f"{said} in #{printable(post.channel)}"
    if post.hashes:
        return f"{said}, deleting {plural(len(post.hashes), 'post')}"
    return said


def _cmd_heads(args) -> int:
    with open_existing(args.store, readonly=True) as store:
        require_channel(store, args.channel)
        heads = [h.hex() for h in store.heads(args.channel)]
    if args.json:
        print_json({"channel": args.channel, "heads": heads})
    for h in [] if args.json else heads:
        print(h)
    return 0


ARGUMENT_HELP = {
    "channel": "the channel name, or #name as `channels` prints it (case-insensitive; written as the channel's posts spell it, see --exact-channel)",
    "text": "the message (at most 4096 bytes of UTF-8)",
    "topic": "the new topic (at most 512 codepoints)",
    "name": "your name (1-32 codepoints)",
    "accept_role": "0: you decline roles (admins' and mods' posts about you are ignored); 1: the default",
}


FREE_TEXT = ("text", "topic", "name")  # a post's last argument that is a text: `post STORE text general hello world`
_ARGUMENT_TYPES = {"accept_role": {"choices": ("0", "1")}, "channel": {"type": channel_name}}


def _post_options(p) -> None:
    """``post``'s options, on ``post`` and again on each KIND, so they may come before or after it (``post STORE text C hi --json``).

    On a KIND's parser (``argument_default=SUPPRESS``) an option left out sets
    nothing, so one given before the KIND is kept.  ``--key`` is required by
    :func:`_cmd_post`, which sees both places.
    """
    unset = {} if p.argument_default is None else {"default": p.argument_default}
    p.add_argument("--key", metavar="KEYFILE", help="the key file (required; see `cablestore keygen`)")
    add_local_user_flag(p, **unset)
    p.add_argument("--json", action="store_true", help="print the stored post as JSON (the fields `dump` prints)")
    p.add_argument(
        "--exact-channel", action="store_true",
        help="write the channel name as given (default: as the channel's earliest post spells it, which case-sensitive peers match)",
    )


def register(sub) -> None:
    """Add ``keygen``, ``post`` and ``heads`` to the ``cablestore`` subcommands."""
    p = sub.add_parser("keygen", help="create a key file (mode 0600) and print its public key (`public key: HEX`; --json: {\"public_key\": HEX})")
    p.add_argument("keyfile", help="where to write the key (never overwritten)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=_cmd_keygen)

    p = sub.add_parser("cabal", help="cabal keys: what keeps a cabal private (docs/security.md)")
    cabal = p.add_subparsers(dest="cabal_command", required=True, metavar="COMMAND")
    k = cabal.add_parser(
        "new", help="write a new random cabal key to FILE (64 hex characters, mode 0600, never overwritten, never printed)",
        description="Write a new random 32-byte cabal key to FILE. Give FILE to serve and sync with --cabal-key; share it only with the cabal's members.",
    )
    k.add_argument("file", help="where to write the key (never overwritten)")
    k.add_argument("--json", action="store_true", help="print the result as JSON")
    k.set_defaults(func=_cmd_cabal_new)

    p = sub.add_parser(
        "post", help="write a post as the key file's owner, linked to the channel's heads (prints `posted TYPE HASH in #CHANNEL`; --json: the post)"
    )
    p.add_argument("store", help="the store directory (created if missing, except for delete)")
    _post_options(p)
    kinds = p.add_subparsers(dest="kind", metavar="KIND", required=True)
    for kind, names, text in (
        ("text", ("channel", "text"), "a chat message"),
        ("join", ("channel",), "join a channel"),
        ("leave", ("channel",), "leave a channel"),
        ("topic", ("channel", "topic"), "set a channel's topic (\"\" clears it)"),
        ("name", ("name",), "set your name (other post/info properties are kept)"),
        ("accept-role", ("accept_role",), "accept (1) or decline (0) roles others give you (your name is kept)"),
    ):
        free = names[-1] in FREE_TEXT  # the last argument is a text: its words may be several arguments, -word among them
        k = kinds.add_parser(kind, help=text, argument_default=argparse.SUPPRESS, free_words=free)
        for name in names:
            many = {"nargs": "+"} if name in FREE_TEXT else {}
            k.add_argument(name, help=ARGUMENT_HELP[name], **_ARGUMENT_TYPES.get(name, {}), **many)
        k.set_defaults(fields=names)
        _post_options(k)
    k = kinds.add_parser("delete", help="delete your own posts", argument_default=argparse.SUPPRESS)
    k.add_argument("hashes", nargs="+", metavar="HASH", help="hex hashes of posts you wrote")
    k.set_defaults(fields=("hashes",))
    _post_options(k)
    p.set_defaults(func=_cmd_post)

    p = sub.add_parser("heads", help="a channel's heads: the posts a new post links to")
    p.add_argument("store", help="the store directory (read only)")
    p.add_argument("channel", type=channel_name, help="the channel name (case-insensitive, #name too; it must exist)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=_cmd_heads)
