"""The web archive as a person reads it: deletes as `show` prints them, #name in URLs, plain error pages, the status
page in words with units; and in Chromium at 1280 px, a search hit's text takes most of its row (screenshots kept)."""

from __future__ import annotations

import pytest

from cablestore import Store
from cablestore.authoring.author import Author
from cablestore.wire.crypto import Keypair

from . import web_helpers as W
from .test_web import fetch

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    with W.served_site(tmp_path_factory) as (built, store, base):
        yield built, store, base


def test_a_channel_named_with_its_hash_sign_is_the_channel(site):
    _, _, base = site
    plain, hashed = fetch(base, "/channel/general"), fetch(base, "/channel/%23general")
    assert plain[0] == hashed[0] == 200 and hashed[2].count('class="post') == plain[2].count('class="post')


def test_error_pages_are_plain_words(site):
    _, _, base = site
    status, _, body = fetch(base, "/channel/nosuch")
    assert status == 404 and "There is no channel #nosuch in this store." in body and "&#39;" not in body and "'nosuch'" not in body


def test_a_delete_is_shown_as_show_prints_it(tmp_path):
    from cablestore.web import pages

    with Store(tmp_path / "s.ldb") as store:
        me = Author(store, Keypair.from_seed(bytes(range(32))))
        said = me.text("general", "oops")
        gone = me.delete(said)
        page = pages.post(store, gone.hex())
        listed = pages.shown(store, store.messages("general", include_hidden=True))
    assert page["title"] == "Deletion" and page["post"].summary == "[deleted 1 post]"
    assert all(s.summary != "post/delete" for s in listed)


def test_status_says_what_its_values_are():
    from cablestore.web.status import LIMIT_WORDS, quantity

    assert LIMIT_WORDS["frame_timeout"](20000)[1] == "20 s" and LIMIT_WORDS["memory_mb"](256)[1] == "256 MB"
    assert LIMIT_WORDS["connections_per_address"](0)[1] == "no limit"
    assert quantity("closed", {"idle": 2, "slow_peer": 3}) == "idle: 2, slow peer: 3"
    assert quantity("buffered_bytes", 1234) == "1,234 bytes"


def test_a_search_hit_text_takes_most_of_its_row_in_chromium(site, tmp_path):
    from playwright.sync_api import sync_playwright

    from .test_web_browser import FLAGS

    _, _, base = site
    shots = tmp_path / "screenshots"  # kept with the test run's tmp dir
    shots.mkdir()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            for name, path in (("channels", "/"), ("channel", "/channel/%23general"), ("users", "/users"), ("moderation", "/moderation"),
                               ("status", "/status"), ("search", "/search?q=message"), ("missing", "/channel/nosuch")):
                page.goto(base + path)
                page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
                assert (shots / f"{name}.png").stat().st_size > 1000
            page.goto(base + "/search?q=message")
            boxes = page.evaluate("""[...document.querySelectorAll('li.hit')].map(li => [li.getBoundingClientRect().width,
                                     li.querySelector('.text').getBoundingClientRect().width])""")
            assert boxes and all(text >= 0.5 * row for row, text in boxes), boxes
            heads = page.evaluate("[...document.querySelectorAll('th')].map(th => th.getClientRects().length === 1 && th.scrollHeight < 40)")
            page.goto(base + "/")
            heads += page.evaluate("[...document.querySelectorAll('th')].map(th => th.offsetHeight < 40)")
            assert heads and all(heads)  # one line each: no header breaks inside a word
        finally:
            browser.close()
