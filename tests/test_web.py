"""`cablestore web` over HTTP: every page, escaping, headers, 4xx pages, no write route, paging, moderation.

One read-only archive of a small hostile store (tests/web_helpers.py) serves the whole module, on a free port
of 127.0.0.1, over real TCP.  The browser tests are in tests/test_web_browser.py.
"""

from __future__ import annotations

import html
import http.client
import re
import subprocess
import sys
import urllib.parse

import pytest
from markupsafe import escape

from cablestore import Store
from cablestore.authoring.workload import generate
from cablestore.cli import main
from cablestore.search.query import marked as pieces
from cablestore.web import CSP
from cablestore.web.app import make_app
from cablestore.web.server import WebThread
from cablestore.web.status import NEVER

from . import web_helpers as W
from .conftest import stop


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    with W.served_site(tmp_path_factory) as site:
        yield site


def fetch(base: str, path: str, method: str = "GET", body: bytes | None = None) -> tuple[int, dict, str]:
    url = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    try:
        conn.request(method, path, body=body)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode("utf-8")
    finally:
        conn.close()


def ok(base: str, path: str) -> str:
    status, headers, body = fetch(base, path)
    assert status == 200, (path, body[:500])
    assert headers["content-security-policy"] == CSP and headers["x-content-type-options"] == "nosniff"
    return body


def pages(built) -> list[str]:
    return ["/", "/channel/general", "/users", "/moderation", "/status", f"/post/{built.reply.hex()}", "/search?q=message"]


def test_every_page_answers_with_the_security_headers_and_no_script(site):
    built, _, base = site
    assert "script-src 'self'" in CSP and "'unsafe-inline'" not in CSP and "default-src 'none'" in CSP
    for path in pages(built):
        body = ok(base, path)
        assert "<script" not in body, path  # no script at all on a store that is not served (live.js is for served ones)
        assert "Traceback" not in body


def test_every_string_of_a_post_is_escaped(site):
    built, _, base = site
    for path in ["/channel/general", "/users", "/moderation", "/", f"/channel/{urllib.parse.quote(W.MARKUP_CHANNEL, safe='')}"]:
        body = ok(base, path)
        assert not re.search(r"<img|<script|<b>", body), path
    body = ok(base, "/channel/general")
    assert str(escape(W.PWN)) in body and "&lt;script&gt;window.__pwned" in body
    assert W.BIDI in body  # shown as written, each inside a <bdi> that isolates it
    assert html.escape(W.REASON) in ok(base, "/moderation")


def test_bad_paths_and_queries_get_4xx_pages_never_a_traceback(site):
    built, _, base = site
    cases = {
        "/nope": 404,
        "/post/zz": 400,
        "/post/" + "0" * 64: 404,
        f"/post/{built.dropped.hex()}": 404,
        "/channel/general?n=0": 400,
        "/channel/general?n=abc": 400,
        "/channel/general?n=1&n=2": 400,
        "/channel/general?before=xyz": 400,
        "/channel/general?before=1-" + "g" * 64: 400,
        "/channel/no-such-channel": 404,
        "/live/general": 404,  # live updates: only on a served store
        "/search?q=" + "x" * 2000: 400,
        "/search?q=a&q=b": 400,
        "/channel/%ff%fe": 404,
        "/static/../pyproject.toml": 404,
    }
    for path, code in cases.items():
        status, headers, body = fetch(base, path)
        assert status == code, (path, status, body[:300])
        assert headers["content-security-policy"] == CSP
        assert "Traceback" not in body and f"<h1>{code}</h1>" in body, path


def test_a_100_kb_url_is_a_400_without_a_traceback_even_in_the_log(site, caplog):
    _, _, base = site
    for path in ("/channel/" + "x" * 100_000, "/search?q=" + "y" * 100_000):
        status, _, body = fetch(base, path)
        assert status == 400 and "Traceback" not in body
    logged = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert logged and all(r.exc_info is None and "LineTooLong" in r.getMessage() for r in logged)


def test_no_route_writes_and_other_methods_are_refused(site, tmp_path):
    built, store, base = site
    before = list(store.items())
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        for path in ("/", "/channel/general", f"/post/{built.reply.hex()}", "/nope"):
            status, headers, body = fetch(base, path, method, b"text=hi")
            assert status == 405 and headers["allow"] == "GET, HEAD" and "read-only" in body, (method, path)
    assert list(store.items()) == before
    with Store(tmp_path / "s") as s:  # the routes themselves: GET (and the HEAD aiohttp adds) only
        methods = {r.method for r in make_app(s).router.routes()}
    assert methods == {"GET", "HEAD"}


def test_a_channel_pages_through_every_message_once_newest_first(site):
    """Pairs of posts share a timestamp, and a page ends between them: the cursor breaks the tie by hash."""
    _, store, base = site
    seen, path = [], "/channel/general?n=7"
    for _ in range(100):  # bounded: 150 messages at 7 a page
        body = ok(base, path)
        seen += re.findall(r'<li class="post[^"]*" id="p-([0-9a-f]{64})"', body)
        nxt = re.search(r'<a rel="next" href="([^"]+)"', body)
        if not nxt:
            break
        path = html.unescape(nxt.group(1))
    expected = [p.hash.hex() for p in store.messages("general", include_hidden=True)]
    assert seen == expected and len(seen) == len(set(seen)) > 3 * 50


def test_moderation_is_respected_hidden_collapsed_dropped_and_blocked_absent(site):
    built, _, base = site
    body = ok(base, "/channel/general?n=500")
    for text in (W.HIDDEN_TEXT, W.HIDDEN_USER_TEXT):
        collapsed = re.search(r'<details class="hidden"><summary>hidden by a moderator</summary><bdi class="text" dir="auto">' + re.escape(text), body)
        assert collapsed, text
    assert W.DROPPED_TEXT not in body and W.BLOCKED_TEXT not in body
    assert built.dropped.hex() not in body and built.blocked.hex() not in body
    mod = ok(base, "/moderation")
    assert "hide-post" in mod or "hide post" in mod
    assert built.hidden.hex()[:16] in mod and built.dropped.hex()[:16] in mod and "drop it" in mod
    assert "blocked by" in mod and "hidden by" in mod


def test_users_tell_colliding_names_apart(site):
    _, _, base = site
    body = ok(base, "/users")
    assert f"sam [{W.SAM1.public_key.hex()[:8]}]" in body and f"Sam [{W.SAM2.public_key.hex()[:8]}]" in body
    assert W.ME.public_key.hex() in body and "admin" in body and "hidden in" in body


def test_a_post_shows_its_links_both_ways(site):
    built, _, base = site
    body = ok(base, f"/post/{built.reply.hex()}")
    assert "Links to (1)" in body and f'href="/post/{built.target.hex()}"' in body
    body = ok(base, f"/post/{built.target.hex()}")
    assert "Linked from (1)" in body and f'href="/post/{built.reply.hex()}"' in body


def test_status_counts_the_store_and_does_not_invent_a_last_check(site):
    _, store, base = site
    body = ok(base, "/status")
    assert f"<dt>posts</dt><dd>{store.stats().posts} (" in body and NEVER in body and "Not served" in body


def test_search_pieces_mark_the_spans_and_nothing_else():
    assert pieces("say <b>hello</b> world", [(7, 12)]) == [("say <b>", False), ("hello", True), ("</b> world", False)]
    assert pieces("abcdef", [(4, 99), (0, 2), (1, 3)]) == [("abc", True), ("d", False), ("ef", True)]
    assert pieces("", []) == [("", False)]


def test_search_marks_the_matches_escaped_leaves_hidden_posts_out_and_pages(site, tmp_path):
    _, store, base = site
    body = ok(base, "/search?q=src%3Dx")  # the index cuts at spaces: "src=x" is a word of the hostile text
    assert "&lt;img <mark>src=x</mark> onerror=" in body and "<script" not in body and "<img" not in body
    hits = lambda body: re.findall(r'<a class="time" href="/post/([0-9a-f]{64})"', body)  # noqa: E731
    assert "hidden by a moderator" not in ok(base, "/search?q=hidden") and hits(ok(base, "/search?q=hidden")) == []
    shown = ok(base, "/search?q=hidden&hidden=1")
    assert "hidden by a moderator" in shown and "<mark>hidden</mark>" in shown
    seen, path = [], "/search?q=message+number&channel=general"
    for _ in range(20):  # bounded: 130 hits, 50 a page
        body = ok(base, path)
        seen += hits(body)
        more = re.search(r'<a rel="next" href="([^"]+)"', body)
        if not more:
            break
        path = html.unescape(more.group(1))
    expected = [h.hash.hex() for h in store.search("message number", channel="general", limit=1000)]
    assert seen == expected and len(expected) == W.PAGE_TEXTS
    assert fetch(base, "/search?q=message&cursor=nonsense")[0] == 400
    with Store(tmp_path / "plain", now=lambda: W.NOW) as plain:  # a store without the index: said so on the page
        web = WebThread(plain, "127.0.0.1", 0)
        try:
            assert "keeps no search index" in ok(f"http://127.0.0.1:{web.start()}", "/search?q=x")
        finally:
            web.stop()


def test_the_command_refuses_a_bad_address_and_a_missing_store_in_one_line(tmp_path, capsys):
    assert main(["web", str(tmp_path / "none"), "--listen", "nowhere"]) == 2
    assert main(["web", str(tmp_path / "none"), "--listen", "127.0.0.1:0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("cablestore web: TransportError") and err[1].startswith("cablestore web: StoreNotFoundError")


def test_the_command_serves_a_store_read_only_until_stopped(site, tmp_path):
    """`cablestore web STORE` in a process of its own: the same pages, beside the module's read-only open; SIGTERM ends it with 0."""
    _, store, _ = site
    port_file = tmp_path / "port"
    proc = subprocess.Popen([sys.executable, "-m", "cablestore", "web", str(store.path), "--listen", "127.0.0.1:0", "--port-file", str(port_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"web archive of {store.path} at http://127.0.0.1:") and "read-only" in line, proc.stderr.read() if not line else line
        base = f"http://127.0.0.1:{int(port_file.read_text())}"
        assert "#general" in ok(base, "/")
    finally:
        assert stop(proc) == 0
    assert not port_file.exists()


def test_cached_labels_follow_a_rename_and_a_new_namesake(tmp_path):
    from cablestore.web.names import Labels
    from cablestore.wire.codec import INFO

    from .conftest import post

    with Store(tmp_path / "s", now=lambda: W.NOW) as s:
        s.ingest(post(W.SAM1, INFO, W.T0, info=[("name", "sam")]))
        labels = Labels(s)
        assert labels([W.SAM1.public_key]) == {W.SAM1.public_key: "sam"}
        s.ingest(post(W.SAM2, INFO, W.T0, info=[("name", "SAM")]))  # a namesake: sam now needs key digits
        assert labels([W.SAM1.public_key])[W.SAM1.public_key] == f"sam [{W.SAM1.public_key.hex()[:8]}]"
        s.ingest(post(W.SAM1, INFO, W.T0 + 1, info=[("name", "samuel")]))
        assert labels([W.SAM1.public_key, W.SAM2.public_key]) == {W.SAM1.public_key: "samuel", W.SAM2.public_key: "SAM"}
        labels.close()


def test_status_shows_what_the_last_repairing_check_recorded_and_a_plain_check_records_nothing(tmp_path):
    from cablestore.rebuild.verify import last_check
    from cablestore.web.status import describe_check, status

    with Store(tmp_path / "s") as s:
        s.ingest_many(generate(seed=5, posts=40))
        assert s.check().consistent and last_check(s) is None  # read-only: not even that it ran
        assert s.check(fix=True).consistent and last_check(s) is None  # a repair inside another command (recover) records nothing
        s.db.delete(next(k for k, _ in s.items() if k.startswith(b"!chat!")))  # a damaged view
        after = s.check(fix=True, record=True)
        record = last_check(s)
    assert after.consistent and record["faults"] == 1 and record["repaired"] and record["consistent"]
    assert record["posts"] == after.posts
    with Store(tmp_path / "s", readonly=True) as ro:
        line = status(ro)["last_check"]
    assert line == describe_check(record) and "1 fault found" in line and "repaired, consistent" in line
    assert main(["check", str(tmp_path / "s"), "--repair", "--quiet"]) == 0  # the command records
    with Store(tmp_path / "s", readonly=True) as ro:
        again = last_check(ro)
    assert again["at"] >= record["at"] and again["faults"] == 0 and not again["repaired"] and again["consistent"]
