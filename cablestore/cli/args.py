"""What every command module shares: argument types, the output flags, JSON
printing, text made safe for one terminal line, and opening a store that
must already exist.  The command modules import this one and never each other."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import shlex
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from cablestore.errors import ChannelNotFoundError

# Kept as they are although not printable: they join emoji and shape scripts,
# and move no text around.
_JOINERS = "\u200c\u200d"


class Parser(argparse.ArgumentParser):
    """The parser of ``cablestore`` and of each of its commands: arguments as people type them.

    A command's parser (one without subcommands of its own) takes its options
    anywhere among its positionals (argparse's intermixed parsing: ``search
    STORE --limit 3 cable tea``), ``--`` ends its options, and a word it cannot
    place is an error of that command, printed with that command's usage (not
    the top level's).  With ``free_words`` (a query or a text is its last
    argument), a word that begins with ``-`` but is none of its options is a
    word of the text (``search STORE cable -tea``: an exclusion), and options
    are never abbreviated; an unknown ``--option`` is still an error (a text
    word that begins with ``--`` follows a ``--``).
    """

    def __init__(self, *args, free_words: bool = False, **kwargs) -> None:
        if free_words:
            kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        self.free_words = free_words
        self._intermixing = False

    def _leaf(self) -> bool:
        return self._subparsers is None

    def parse_known_args(self, args=None, namespace=None):
        if self._intermixing or not self._leaf():
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            namespace, extras = self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False
        if extras:  # this command's error, with its usage: the top level would print its own
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def _parse_optional(self, arg_string):
        if self.free_words and len(arg_string) > 1 and arg_string[0] == "-" and arg_string[1] != "-":
            if arg_string.split("=", 1)[0] not in self._option_string_actions:
                return None  # a word of the query or text (-word: an exclusion); an unknown --option stays an error
        return super()._parse_optional(arg_string)


def joined(words) -> str | None:
    """Words given as several arguments (``post STORE text general hello world``) as one text; None for none."""
    if words is None:
        return None
    return words if isinstance(words, str) else " ".join(words)


def printable(text: str) -> str:
    r"""``text`` safe for one line of a terminal: every character that is not
    printable (newline, tab, NUL and other controls, bidi overrides and
    isolates, line separators) is written as Python writes it in a string
    literal (``\n``, ``\t``, ``\x00``, ``\u202e``).  Printable text is returned unchanged."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in _JOINERS else repr(c)[1:-1] for c in text)


def _json_escape(c: str) -> str:
    n = ord(c)
    if n < 0x10000:
        return f"\\u{n:04x}"
    n -= 0x10000
    return f"\\u{0xD800 + (n >> 10):04x}\\u{0xDC00 + (n & 0x3FF):04x}"


def json_text(data, indent: int | None = None) -> str:
    """``data`` as JSON (keys sorted with ``indent``), non-ASCII text kept but every unprintable character \\u-escaped.

    ``json`` escapes only the controls below U+0020; a bidi override or a
    line separator in a channel name would otherwise reach the terminal.
    """
    text = json.dumps(data, indent=indent, sort_keys=indent is not None, ensure_ascii=False)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == "\n" or c in _JOINERS else _json_escape(c) for c in text)


def print_json(data) -> None:
    """Print ``data`` as indented, key-sorted JSON (the ``--json`` output of every command)."""
    print(json_text(data, indent=2))


def error_line(command: str, exc: BaseException) -> str:
    """The one stderr line of a failed command: ``cablestore COMMAND: ErrorClass: message``."""
    return printable(f"cablestore {command}: {type(exc).__name__}: {error_message(exc)}")


# Library errors name the library's arguments; the command line says the
# same with its flags.  Each pair: (a library phrase, the command line's).
_CLI_WORDS = (
    ("; Store.check(fix=True) sets it aside", "; run `cablestore check STORE --repair`"),
    ("(hold it open with that local_user)", "(serve it with --local-user)"),
    ("(master with engine='local')", "(--master with --engine local)"),
    ("give a store path (repair needs one), or snapshot=DIR to verify a snapshot", "give a STORE (repair needs one), or --snapshot DIR to verify a snapshot"),
    ("repair=True works on a store path, not on a snapshot", "--repair works on a STORE, not on --snapshot"),
    ("required for engine='spark'", "required for --engine spark"),
    ("(install a JDK, or use engine='local')", "(install a JDK, or use --engine local)"),
    ("(PYSPARK_PYTHON, or ship_env=True)", "(PYSPARK_PYTHON, or drop --no-ship-env)"),
    ("(moderation.md §4.6); give no channel", "(moderation.md §4.6); leave out --channel"),
    ("(open it with Store(path, search=True), or call Store.enable_search())", "(build it with `cablestore search --enable STORE`)"),
    ("` (or Store.migrate) to upgrade it", "` to upgrade it"),
    ("(no cabal key there?)", "(no --cabal-key there?)"),
    ("it with its cabal key (cabal_key=)", "it with --cabal-key FILE (its cabal key)"),
    ("it may require a cabal key (cabal_key=)", "it may require a cabal key (--cabal-key)"),
    ("(pass a SearchPage.next)", "(give --cursor what a search printed after `more:`)"),
)
_CLI_PATTERNS = (
    # A snapshot given where a store is wanted: only check and rebuild read one (every command may get it).
    (re.compile(r"\(verify it as a snapshot: snapshot=(.*)\)$"), lambda m: f"(verify it with `cablestore check --snapshot {shlex.quote(m[1])}`)"),
    (  # a moderation action given nothing to act on (cablestore.authoring.moderating)
        re.compile(r"^(\S+) needs (user keys, )?post hashes( or a channel)?$"),
        lambda m: f"{m[1]} needs {'--user PUBKEYs, ' if m[2] else ''}--post HASHes{' or --channel C' if m[3] else ''}",
    ),
)


def error_message(exc: BaseException) -> str:
    """An exception's message, in the command line's words (its flags); an ``OSError`` as ``FILE: reason`` (never a raw ``[Errno 2]``)."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename is not None else exc.strerror
    text = str(exc) or type(exc).__name__
    for library, cli in _CLI_WORDS:
        text = text.replace(library, cli)
    for pattern, spell in _CLI_PATTERNS:
        text = pattern.sub(spell, text)
    return text


def report_error(args, exc: BaseException) -> int:
    """Print the error: one line on stderr, and with ``--json`` an object on stdout; return exit status 2."""
    print(error_line(getattr(args, "command", None) or "", exc), file=sys.stderr)
    if getattr(args, "json", False):
        print_json({"error": type(exc).__name__, "message": error_message(exc)})
    return 2


def require_store(path: str) -> None:
    """Refuse ``path`` as opening an existing store would (same error, same words), without opening it."""
    from cablestore.store.lifecycle import opening

    p = Path(path)
    refused = opening.refusal(p, opening.classify(p), create=False)
    if refused is not None:
        raise refused


#: The signals that end a command as Ctrl-C does: kill, a closed terminal.
INTERRUPTING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_as_interrupt():
    """SIGTERM and SIGHUP unwind like Ctrl-C (SIGINT) while a command runs: exit 130, ``cablestore COMMAND: interrupted``.

    So every writer's clean-up runs whatever stops it: ``generate``'s hidden
    ``.FILE.PID.partial``, an export's ``DIR.partial-XXXX``, the temporary
    snapshot of a Spark rebuild and a key file begun are removed.  Only in
    the main thread (a command run through ``serve`` is not signalled); an
    asyncio loop (``serve``, ``sync --live``) sets its own handlers while it runs.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    # py4j logs an interrupted call through the root logger, which would print a traceback.
    root = logging.getLogger()
    quiet = logging.NullHandler() if not root.handlers else None
    if quiet:
        root.addHandler(quiet)
    previous = {sig: signal.signal(sig, interrupt) for sig in INTERRUPTING_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if quiet:
            root.removeHandler(quiet)


_served = threading.local()  # in a serving process, the thread running a command for a control client


@contextlib.contextmanager
def serving(store, cwd: str):
    """Within this block (in this thread), the store commands open is ``store``, held by ``serve``; relative paths are from ``cwd``.

    ``serve`` runs the commands of its control socket so (see :mod:`cablestore.peer.control`).
    """
    _served.store, _served.cwd = store, cwd
    try:
        yield
    finally:
        _served.store = _served.cwd = None


def write_port_file(path: str, port: int) -> None:
    """Write ``port`` to ``path`` at once (a reader never sees half of it): ``--port-file`` of ``serve`` and ``web``."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{port}\n")
    os.replace(tmp, path)


def served_store():
    """The store ``serve`` holds, when this thread runs a command for a control client; else None."""
    return getattr(_served, "store", None)


def client_path(path: str | None) -> str | None:
    """``path`` as the command's caller meant it: relative to the client's directory when run through ``serve``."""
    cwd = getattr(_served, "cwd", None)
    return path if path is None or cwd is None else os.path.join(cwd, path)


def store_or_path(path: str):
    """The store ``serve`` holds when run through it, else ``path`` (for the library functions taking either)."""
    store = served_store()
    return path if store is None else store


def open_existing(path: str, **options):
    """Open the store at ``path`` without creating anything; a path that holds none is refused.

    ``options``: more :class:`cablestore.Store` arguments (``local_user=``, say;
    ``readonly=True`` for the commands that only read: nothing in the store's directory is written).
    Run through ``serve`` (:func:`serving`): the store it holds, left open at
    the end of the ``with`` block.
    """
    from cablestore.store.store import Store

    store = served_store()
    if store is not None:
        return contextlib.nullcontext(store)
    return Store(path, create=False, **options)


def open_store(path: str, **options):
    """The store ``serve`` holds when run through it (left open), else ``Store(path, **options)``: created if missing (``ingest``)."""
    from cablestore.store.store import Store

    store = served_store()
    return Store(path, **options) if store is None else contextlib.nullcontext(store)


def require_channel(store, channel: str) -> str:
    """The canonical spelling of ``channel``; :class:`cablestore.errors.ChannelNotFoundError` if the store holds no such channel.

    The commands that show one channel (``show``, ``heads``, ``dump
    --channel``) refuse an unknown name instead of printing nothing, so a
    typo is not mistaken for an empty channel.
    """
    from cablestore.keyspace.keys import canonical_channel

    known = store.channel_list()
    wanted = canonical_channel(channel)
    if wanted not in known:
        listed = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "")
        raise ChannelNotFoundError(f"no channel {channel!r} in {store.path} (channels: {listed or 'none'}; see `cablestore channels STORE`)")
    return wanted


def channel_name(text: str) -> str:
    """An argparse type: a channel name, given as ``general`` or as ``channels`` prints it, ``#general``.

    One leading ``#`` is dropped, so a channel whose name itself begins with
    ``#`` is written with two (``##x``), as ``channels`` prints it.
    """
    return text[1:] if text.startswith("#") else text  # an empty name is the library's to refuse, as any bad name


def int_at_least(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``minimum`` (and at most ``maximum``: every option counting work to do has one).

    A number out of range is refused while parsing, in one line naming the
    range, so ``generate --posts 99999999999999999999`` never starts.
    """
    span = f"an integer of at least {minimum}" if maximum is None else f"an integer from {minimum} to {maximum}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {span}, got {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be {span.removeprefix('an integer ')}, got {value}")
        return value

    return parse


# The largest value of each kind of count option (--limit has none: a limit beyond any count shows all).
MAX_POSTS = 100_000_000  # generate --posts, demo --posts: about three hours of signing
MAX_BATCH = 1_000_000  # ingest --batch
MAX_WORKERS = 256  # --workers (Store's verify_workers takes at most 256)
MAX_CACHE_MB = 65_536  # --cache-mb (Store's cache_mb takes at most 65536)
MAX_CONNECTIONS = 100_000  # serve --max-connections, --max-per-address, --max-per-user, --max-live
MAX_MEMORY_MB = 1 << 20  # --memory-mb (1 TiB)

positive_int = int_at_least(1)
partitions_int = int_at_least(1, 256)  # a partition count: one hash-prefix byte


def peer_address(text: str) -> str:
    """An argparse type: a peer's ``HOST:PORT`` (port 1-65535)."""
    from cablestore.errors import TransportError
    from cablestore.peer.sockets import parse_address

    try:
        parse_address(text)
    except TransportError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def positive_float(text: str) -> float:
    """An argparse type: a finite number above 0 (seconds, say)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text}")
    return value


def add_local_user_flag(p, default=None) -> None:
    """Add ``--local-user HEX``: the store's local user, the root of moderation authority (kept once set)."""
    p.add_argument(
        "--local-user", default=default, metavar="HEX",
        help="the public key whose moderation this store applies (kept in the store once set; a different one is refused)",
    )


def add_output_flags(p) -> None:
    """Add ``--quiet`` and ``--json`` to a subcommand's parser."""
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def describe_lost_post(p: dict) -> str:
    """One lost post as a person reads it: when, who, where, what, and its hash."""
    import datetime as dt

    when = dt.datetime.fromtimestamp(p["timestamp"] / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if p.get("timestamp") is not None else "time unknown"
    who = f"{p['name'] or '(no name)'} [{p['author'][:8]}]" if p.get("author") else "author unknown"
    where = f"#{p['channel']}" if p.get("channel") else "-"
    return f"{when}  {who}  {where}  {p.get('type') or 'type unknown'}  {p['hash']}"
