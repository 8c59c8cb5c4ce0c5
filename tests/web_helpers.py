"""A small moderated, hostile store for the web archive's tests (tests/test_web.py, tests/test_web_browser.py).

Channel ``general``: 130 post/texts (three pages of 50; some share a timestamp,
so the pager must break ties by hash), from two users both named "sam"
(``sam`` and ``Sam``), a reply linking to an earlier post, a hidden post, a
hidden user's post, a dropped post and a blocked user's (both absent), and
hostile texts: script tags, an ``onerror`` image, bidi overrides, and
unbroken 4 KB texts (the spec's limit: a store refuses more; names stop
at 32 codepoints), 100 KB of them on one page.
A channel whose name is markup, and one whose name needs URL escaping.
The store keeps the search index.
"""

from __future__ import annotations

import contextlib

from cablestore import Store
from cablestore.web.server import WebThread
from cablestore.wire.codec import DROP_POST, HIDE_POST, INFO, TEXT, TOPIC

from .conftest import NOW, keypair, post
from .moderation_helpers import act, block, hide

ME, SAM1, SAM2, MALLORY, HIDEY, GONE, LONG = (keypair(n) for n in ("web me", "web sam", "web Sam", "web mallory", "web hidey", "web gone", "web long"))
T0 = NOW - 3_600_000
PWN = "<script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\">"
BIDI = "abc\u202egnp.exe\u202c and \u2066isolated\u2069 \u200f"
HUGE = "W" * 4096  # the spec's limit for a text: one unbroken word
EVIL_NAME = "<img src=x onerror=alert(1)>"  # names are at most 32 codepoints
LONG_NAME = "\u202e" + "W" * 31  # the longest name, unbroken, behind a bidi override
MARKUP_CHANNEL = "<img src=x onerror=alert(1)>"
ODD_CHANNEL = "a/b?c#d %2F é"
HIDDEN_TEXT = "this post was hidden by the local user"
HIDDEN_USER_TEXT = "hidey says hello"
DROPPED_TEXT = "this post was dropped"
BLOCKED_TEXT = "a blocked user wrote this"
REASON = "spam <b>not bold</b>"
PAGE_TEXTS = 130


class Built:
    """What the tests look for: hashes of the posts that matter."""

    hidden: bytes
    reply: bytes
    target: bytes
    dropped: bytes
    blocked: bytes


def build(path) -> Built:
    """Write the store at ``path`` (closed on return)."""
    b = Built()
    with Store(path, now=lambda: NOW, local_user=ME.public_key, search=True) as s:
        for kp, name in ((SAM1, "sam"), (SAM2, "Sam"), (MALLORY, EVIL_NAME), (LONG, LONG_NAME), (HIDEY, "hidey"), (GONE, "gone")):
            s.ingest(post(kp, INFO, T0, info=[("name", name)]))
        for i in range(PAGE_TEXTS):  # pairs share a timestamp: ties across page boundaries
            s.ingest(post(SAM1 if i % 2 else SAM2, TEXT, T0 + 10 + i // 2, channel="general", text=f"message number {i}"))
        b.target = s.channel_time_range("general", limit=1)[0]
        t = T0 + 1000
        b.reply = s.ingest(post(SAM1, TEXT, t, [b.target], channel="general", text="a reply linking to the message before"))
        b.hidden = s.ingest(post(SAM2, TEXT, t + 1, channel="general", text=HIDDEN_TEXT))
        s.ingest(post(HIDEY, TEXT, t + 2, channel="general", text=HIDDEN_USER_TEXT))
        b.dropped = s.ingest(post(SAM1, TEXT, t + 3, channel="general", text=DROPPED_TEXT))
        b.blocked = s.ingest(post(GONE, TEXT, t + 4, channel="general", text=BLOCKED_TEXT))
        for i, text in enumerate((PWN, BIDI, *[HUGE] * 24, PWN + HUGE[: 4096 - len(PWN.encode())])):
            s.ingest(post(MALLORY if i % 2 else LONG, TEXT, t + 10 + i, channel="general", text=text))
        s.ingest(post(MALLORY, TOPIC, t + 40, channel="general", topic=PWN))
        s.ingest(post(MALLORY, TEXT, t + 41, channel=MARKUP_CHANNEL, text=PWN))
        s.ingest(post(SAM1, TEXT, t + 42, channel=ODD_CHANNEL, text="an odd channel name"))
        s.ingest(act(ME, HIDE_POST, t + 50, [b.hidden], channel="general", reason=REASON)[0])
        s.ingest(hide(ME, HIDEY, t + 51)[0])
        s.ingest(act(ME, DROP_POST, t + 52, [b.dropped], channel="general", reason="drop it")[0])
        s.ingest(block(ME, GONE, t + 53, drop=1)[0])
    return b


def start_web(path) -> tuple[WebThread, Store, str]:
    """The archive of the store at ``path``, opened read-only, on a free port of 127.0.0.1: (thread, store, base URL)."""
    store = Store(path, readonly=True)
    web = WebThread(store, "127.0.0.1", 0)
    try:
        port = web.start()
    except BaseException:
        store.close()
        raise
    return web, store, f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def served_site(tmp_path_factory):
    """A module's site: the store built in a fresh directory and its archive running: (built, store, base URL)."""
    path = tmp_path_factory.mktemp("web") / "store"
    built = build(path)
    web, store, base = start_web(path)
    try:
        yield built, store, base
    finally:
        web.stop()
        store.close()
