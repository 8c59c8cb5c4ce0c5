"""`cablestore web` in a real browser: Debian's headless Chromium (/usr/bin/chromium, which .ci/run
installs), driven by Playwright's Python client; no browser is downloaded.  One browser for the module.

Every page is loaded and screenshotted (under the test's tmp_path), links followed, a channel paged, the
hidden-post marker opened, hostile content checked to run no script and not to widen the page, search
used, and a served store's new post seen arriving without a reload.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from playwright.sync_api import sync_playwright

from . import web_helpers as W
from .conftest import stop

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_MS = 15_000
CLI = [sys.executable, "-m", "cablestore"]


@pytest.fixture(scope="module")
def browser():
    # Playwright gives each launch a fresh, empty --user-data-dir of its own.
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    with W.served_site(tmp_path_factory) as (built, _store, base):
        yield built, base


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1000, "height": 800})
    p = context.new_page()
    p.dialogs = []
    p.errors = []
    p.on("dialog", lambda d: (p.dialogs.append(d.message), d.dismiss()))
    p.on("pageerror", lambda e: p.errors.append(str(e)))
    p.on("console", lambda m: p.errors.append(m.text) if "Content Security Policy" in m.text else None)  # a CSP refusal is logged so
    try:
        yield p
    finally:
        context.close()


def unharmed(page) -> None:
    """No script of a post ran (no flag set, no dialog) and nothing widens the page past the viewport."""
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.dialogs == [] and page.errors == []
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], width


def test_every_page_loads_unharmed_and_is_screenshotted(site, page, tmp_path):
    built, base = site
    for name, path in [("channels", "/"), ("channel", "/channel/general"), ("users", "/users"), ("moderation", "/moderation"),
                       ("status", "/status"), ("post", f"/post/{built.reply.hex()}"), ("search", "/search?q=message"),
                       ("markup-channel", "/channel/" + W.MARKUP_CHANNEL.replace("<", "%3C").replace(">", "%3E").replace(" ", "%20")),
                       ("missing", "/post/" + "0" * 64), ("readme", f"/channel/general?n=12&before={W.T0 + 1010}-{'0' * 64}")]:
        response = page.goto(base + path)
        assert response.status == (404 if name == "missing" else 200), (name, response.status)
        page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=name != "channel")
        if os.environ.get("CABLESTORE_WEB_SHOTS"):  # docs/web.png is made so: CABLESTORE_WEB_SHOTS=docs pytest tests/test_web_browser.py
            page.locator("body").screenshot(path=os.path.join(os.environ["CABLESTORE_WEB_SHOTS"], f"web-{name}.png"))
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
        unharmed(page)


def test_hostile_posts_show_as_text_in_the_page(site, page):
    _, base = site
    page.goto(base + "/channel/general")
    texts = page.locator("li.post .text").all_inner_texts()
    assert W.PWN in texts and any(t.startswith("W" * 100) for t in texts)
    assert page.locator("li.post .who", has_text="img src=x").count() > 0  # the markup name, as text
    unharmed(page)


def test_follow_links_page_a_channel_and_open_a_post(site, page):
    built, base = site
    page.goto(base + "/")
    page.click("a.channel >> text=#general")
    assert page.url.endswith("/channel/general")
    first = page.locator("li.post").first.get_attribute("id")
    page.click("a[rel=next]")
    page.wait_for_url("**before=*")
    second = page.locator("li.post").first.get_attribute("id")
    page.click("a[rel=next]")
    page.wait_for_url("**before=*")
    third = page.locator("li.post").first.get_attribute("id")
    assert len({first, second, third}) == 3
    page.click("text=newest")
    assert page.locator("li.post").first.get_attribute("id") == first
    page.goto(f"{base}/post/{built.reply.hex()}")
    page.click(f"a[href='/post/{built.target.hex()}']")
    assert page.url.endswith(built.target.hex()) and page.locator("text=Linked from (1)").count() == 1
    page.click("a[href='/users']")
    assert page.locator("h1").inner_text() == "Users"
    unharmed(page)


def test_the_hidden_post_is_collapsed_behind_its_marker_and_shown_on_request(site, page):
    _, base = site
    page.goto(base + "/channel/general")
    item = page.locator("li.post.is-hidden", has_text="hidden by a moderator").filter(has=page.locator(f"text={W.HIDDEN_TEXT}"))
    assert item.count() == 1
    text = item.locator(".text")
    assert not text.is_visible()
    item.locator("summary").click()
    assert text.is_visible() and text.inner_text() == W.HIDDEN_TEXT
    assert page.locator(f"text={W.DROPPED_TEXT}").count() == 0 and page.locator(f"text={W.BLOCKED_TEXT}").count() == 0


def test_the_search_box_finds_and_marks_and_pages(site, page, tmp_path):
    _, base = site
    page.goto(base + "/")
    page.fill("form.search input[name=q]", "message number")
    page.click("form.search button")
    page.wait_for_url("**/search?q=*")
    hits = page.locator("ol.hits li.post")
    assert hits.count() == 50 and hits.first.locator("mark").all_inner_texts() == ["message", "number"]
    page.click("a[rel=next]")
    page.wait_for_url("**cursor=*")
    assert hits.count() == 50 and "message number" in hits.first.inner_text()
    page.fill("form.search-full input[name=q]", "src=x")  # a hostile text's word: found, shown as text
    page.click("form.search-full button")
    page.wait_for_url("**q=src%3Dx*")
    assert hits.count() > 0 and hits.first.locator("mark").first.inner_text() == "src=x"
    page.screenshot(path=str(tmp_path / "search.png"), full_page=True)
    unharmed(page)


def _cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=60, cwd=cwd)


def _wait_for_file(path, proc) -> str:
    deadline = time.monotonic() + 30
    while not path.exists():
        assert proc is None or proc.poll() is None, "the process ended"
        assert time.monotonic() < deadline, f"no {path.name}"
        time.sleep(0.05)
    return path.read_text().strip()


def test_a_served_store_shows_peers_and_new_posts_live(page, tmp_path):
    key, store = tmp_path / "me.key", tmp_path / "peer.ldb"
    assert _cli("keygen", key).returncode == 0
    assert _cli("post", store, "--key", key, "text", "general", "before serving").returncode == 0
    serve = subprocess.Popen([*CLI, "serve", store, "--listen", "127.0.0.1:0", "--port-file", tmp_path / "port", "--quiet"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        peer_port = int(_wait_for_file(tmp_path / "port", serve))
        web = _cli("web", store.name, "--listen", "127.0.0.1:0", "--port-file", "web.port", cwd=tmp_path)  # through serve
        assert web.returncode == 0 and "in the serving process" in web.stdout, web.stderr
        base = f"http://127.0.0.1:{_wait_for_file(tmp_path / 'web.port', serve)}"
        with socket.create_connection(("127.0.0.1", peer_port)):  # a connected peer (it sends nothing)
            page.goto(base + "/status")
            page.wait_for_selector("text=Connected peers (1)", timeout=WAIT_MS)
            page.screenshot(path=str(tmp_path / "status-served.png"), full_page=True)
        page.goto(base + "/channel/general")
        assert page.locator("script[src='/static/live.js']").count() == 1
        page.wait_for_selector("#messages[data-live-state=open]", state="attached", timeout=WAIT_MS)  # the EventSource connected
        posted = _cli("post", store, "--key", key, "text", "general", "<b>live</b> " + W.PWN, cwd=tmp_path)
        assert posted.returncode == 0, posted.stderr
        page.wait_for_selector("li.post.live", timeout=WAIT_MS)
        assert page.locator("li.post.live .text").inner_text() == "<b>live</b> " + W.PWN
        assert page.locator("li.post").count() == 2
        page.screenshot(path=str(tmp_path / "channel-live.png"))
        unharmed(page)
    finally:
        assert stop(serve) == 0
    assert not (tmp_path / "web.port").exists() and not os.path.exists(tmp_path / "port")  # serve removed both
