"""Search through the store: the opt-in ``!search`` view, ``Store.search``, and the ``search`` command.

The text rules themselves (normalization, terms, the query language) are
tested in their own module; these tests hold whatever the rules are: every
expected answer is computed with ``cablestore.search`` (``parse(q).match``).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cablestore import DELETE, INFO, TEXT, TOPIC, Store, decode_post, post_hash
from cablestore.cli.search import BOLD, highlighted
from cablestore.errors import CableError, QueryError, ReadOnlyStoreError, SearchNotEnabledError
from cablestore.keyspace.keys import POSTS, SEARCH, SEARCH_KEY
from cablestore.keyspace.records import Indexed
from cablestore.search import Lookup, parse
from cablestore.store.search_index.searcher import SearchHit
from cablestore.store.write import indexer
from cablestore.views import search as search_view
from cablestore.wire.codec import DROP_CHANNEL, DROP_POST, HIDE_POST, HIDE_USER, UNHIDE_POST

from . import moderation_helpers as mh
from .conftest import NOW, dump, keypair, post
from .test_control import cli, served  # noqa: F401  (the fixture: a store held by `serve`)

H = post_hash
ALICE, BOB, LOCAL = keypair("alice"), keypair("bob"), keypair("local")


def text(kp, ts, body, channel="dev"):
    return post(kp, TEXT, ts, channel=channel, text=body)


def search_keys(store) -> list[bytes]:
    return [k for k, _ in store.items(SEARCH)]


def all_pages(store, q, **kw) -> list[bytes]:
    """Every hit of ``q``, page after page (limit 2), as hashes."""
    out, cursor = [], None
    for _ in range(100):
        page = store.search(q, limit=2, cursor=cursor, **kw)
        out += [h.hash for h in page]
        cursor = page.next
        if cursor is None:
            return out
    raise AssertionError("paging did not end")


@pytest.fixture
def searchable(tmp_path):
    with Store(tmp_path / "s", now=lambda: NOW, search=True) as s:
        yield s


def test_search_finds_texts_and_topics_newest_first_with_spans_pages_and_filters(searchable):
    s = searchable
    posts = [
        text(ALICE, 1000, "deploy failed again"),
        text(BOB, 1001, "the deploy worked", "news"),
        post(ALICE, TOPIC, 1002, channel="dev", topic="deploy day"),
        text(BOB, 1003, "lunch?"),
        text(ALICE, 1004, "Deploy FAILED, rolling back"),
        post(BOB, INFO, 1005, info=[("name", "bobby")]),
    ]
    s.ingest_many(posts)
    page = s.search("deploy")
    assert [h.hash for h in page] == [H(posts[i]) for i in (4, 2, 1, 0)] and page.next is None
    assert all(isinstance(h, SearchHit) for h in page)
    for hit in page:  # each span is a match of the query in the text it indexes
        assert hit.spans == tuple(tuple(x) for x in parse("deploy").match(hit.searched))
    assert page[1].text is None and page[1].searched == "deploy day" and page[1].to_dict()["spans"] == [list(x) for x in page[1].spans]
    assert all_pages(s, "deploy") == [h.hash for h in page]
    assert [h.hash for h in s.search("deploy", channel="NEWS")] == [H(posts[1])]
    assert [h.hash for h in s.search("deploy", author=BOB.public_key)] == [H(posts[1])]
    assert [h.hash for h in s.search("deploy", author="bobby")] == [H(posts[1])]  # a name
    assert [h.hash for h in s.search("deploy", author=ALICE.public_key.hex()[:6])] == [H(posts[i]) for i in (4, 2, 0)]  # a key prefix
    assert [h.hash for h in s.search("deploy", start=1001, end=1004)] == [H(posts[i]) for i in (2, 1)]  # [start, end)
    assert s.search("deploy", author="nobody") == [] and s.search("nothing-like-it") == []
    assert s.search("deploy").examined == 4
    with pytest.raises(QueryError):
        s.search("deploy", limit=0)
    with pytest.raises(QueryError):
        s.search("deploy", cursor="bogus")
    with pytest.raises(QueryError):
        s.search(b"deploy")


def test_the_work_bounds_stop_a_page_early_and_its_cursor_goes_on_from_there(searchable, monkeypatch):
    from cablestore.store.search_index import postings
    from cablestore.store.search_index import searcher as searching

    s = searchable
    bufs = [text(ALICE, 1000 + i, f"ab{i % 3} same") for i in range(6)]
    s.ingest_many(bufs)
    newest_first = [H(b) for b in reversed(bufs)]
    monkeypatch.setattr(searching, "MAX_EXAMINED", 1)
    page = s.search("same")
    assert page.examined == 1 and len(page) == 1 and page.next is not None
    assert all_pages(s, "same") == newest_first
    monkeypatch.setattr(searching, "MAX_EXAMINED", 2000)
    monkeypatch.setattr(postings, "MAX_SEEKS", 3)
    assert all_pages(s, "same ab1") == [H(bufs[4]), H(bufs[1])]  # probes run out: each page goes on where the last stopped
    monkeypatch.setattr(postings, "MAX_SEEKS", 20_000)
    prefix = parse("ab*")
    assert prefix.lookups == ((Lookup("ab", prefix=True),),)
    assert [h.hash for h in s.search(prefix)] == newest_first  # a union of the three terms ab0, ab1, ab2
    monkeypatch.setattr(postings, "MAX_PREFIX_TERMS", 2)
    with pytest.raises(QueryError, match="more letters"):
        s.search(prefix)


def test_a_store_without_the_index_refuses_to_search_and_costs_nothing_until_enabled(tmp_path):
    with Store(tmp_path / "s", now=lambda: NOW) as s:
        h = s.ingest(text(ALICE, 1000, "deploy"))
        assert search_keys(s) == [] and not s.search_enabled
        with pytest.raises(SearchNotEnabledError, match="enable_search"):
            s.search("deploy")
        assert s.check().consistent  # nothing expected of the view
        assert s.enable_search() > 0 and s.db.get(SEARCH_KEY) is not None
        assert [x.hash for x in s.search("deploy")] == [h] and s.check().consistent
        assert s.enable_search() == 0  # kept already
    with Store(tmp_path / "s", readonly=True) as ro:  # a read-only store is searchable
        assert [x.hash for x in ro.search("deploy")] == [h]
        with pytest.raises(ReadOnlyStoreError):
            ro.enable_search()
    with Store(tmp_path / "s") as s:  # the flag is kept: later writes keep the index
        s.ingest(text(BOB, 1001, "deploy again"))
        assert len(s.search("deploy")) == 2
        assert s.disable_search() > 0 and search_keys(s) == [] and s.check().consistent
        s.ingest(text(BOB, 1002, "deploy more"))
        assert search_keys(s) == []


def test_a_delete_removes_the_search_entries_in_its_own_write_batch(searchable):
    s = searchable
    t = text(ALICE, 1000, "secret plans")
    s.ingest(t)
    target_keys = [k for k, _ in search_view.entries(Indexed.of(t))]
    assert target_keys and all(s.db.get(k) is not None for k in target_keys)
    d = post(ALICE, DELETE, 1001, hashes=(H(t),))
    with s.writer.batch() as batch:  # committed by the writer when the block ends
        assert indexer.apply(batch, d, H(d), decode_post(d)) is True
        # Before the commit: the batch deletes the post and every one of its search keys, the DB still has them.
        assert batch.writes[POSTS + H(t)] is None and all(k in batch.writes and batch.writes[k] is None for k in target_keys)
        assert all(s.db.get(k) is not None for k in target_keys)
    assert all(s.db.get(k) is None for k in target_keys) and s.search("secret") == []
    assert s.check().consistent


def test_moderation_hides_blocks_and_drops_what_search_finds(tmp_path):
    with Store(tmp_path / "s", now=lambda: NOW, local_user=LOCAL.public_key, search=True) as s:
        a, b, c = text(ALICE, 1000, "word one"), text(BOB, 1001, "word two"), text(BOB, 1002, "word three", "news")
        s.ingest_many([a, b, c])
        assert [h.hash for h in s.search("word")] == [H(c), H(b), H(a)]
        hide = mh.act(LOCAL, HIDE_POST, 1100, [H(a)], "dev")[0]
        s.ingest(hide)
        assert [h.hash for h in s.search("word")] == [H(c), H(b)]
        shown = s.search("word", include_hidden=True)
        assert [h.hash for h in shown] == [H(c), H(b), H(a)] and shown[2].hidden_by == H(hide)
        s.ingest(mh.act(LOCAL, UNHIDE_POST, 1101, [H(a)], "dev")[0])
        assert len(s.search("word")) == 3
        s.ingest(mh.act(LOCAL, HIDE_USER, 1102, [BOB.public_key])[0])
        assert [h.hash for h in s.search("word")] == [H(a)]
        s.ingest(mh.block(LOCAL, ALICE, 1103, drop=0)[0])  # a block that keeps her posts: never found, even hidden ones
        assert s.get(H(a)) is not None and H(a) not in [h.hash for h in s.search("word", include_hidden=True)]
        s.ingest(mh.act(LOCAL, DROP_POST, 1104, [H(b)], "dev")[0])
        s.ingest(mh.act(LOCAL, DROP_CHANNEL, 1105, channel="news")[0])
        assert s.get(H(b)) is None and s.get(H(c)) is None
        assert [h.hash for h in s.search("word", include_hidden=True)] == []
        assert all(not k.endswith(H(b)) and not k.endswith(H(c)) for k in search_keys(s))  # their rows went with them
        s.ingest(mh.block(LOCAL, BOB, 1106, drop=1)[0])
        assert s.check().consistent


def test_check_repairs_and_reindex_rebuilds_a_damaged_search_view(searchable):
    from cablestore.rebuild.reindex import reindex

    s = searchable
    s.ingest_many([text(ALICE, 1000 + i, f"row {i} common") for i in range(5)])
    before = dump(s)
    keys = search_keys(s)
    s.db.delete(keys[0])
    s.db.put(SEARCH + b"bogus\x00" + bytes(40), b"")
    s.db.put(keys[1], b"x")
    report = s.check()
    counts = {k: v for k, v in report.to_dict()["views"]["search"].items() if k != "examples"}
    assert not report.consistent and counts == {"live": len(keys), "recomputed": len(keys), "missing": 1, "extra": 1, "different": 1}
    assert s.check(fix=True).consistent and dump(s) == before
    s.db.delete(keys[2])
    reindex(s)
    assert dump(s) == before


@pytest.mark.spark
def test_the_spark_engine_verifies_the_search_view_like_the_local_one(searchable, spark_session):
    s = searchable
    s.ingest_many([text(ALICE, 1000 + i, f"spark {i}") for i in range(3)])
    s.db.delete(search_keys(s)[0])
    local, spark = s.check(), s.check(engine="spark")
    assert spark.to_dict()["views"]["search"] == local.to_dict()["views"]["search"] and local.to_dict()["views"]["search"]["missing"] == 1
    assert s.check(engine="spark", fix=True).consistent and s.check().consistent


# --- the command ----------------------------------------------------------------


def test_highlighted_marks_spans_on_a_terminal_only():
    assert highlighted("a deploy b", [(2, 8)], bold=True) == f"a {BOLD}deploy\x1b[0m b"
    assert highlighted("a deploy b", [(2, 5), (4, 8)], bold=True) == f"a {BOLD}deploy\x1b[0m b"  # overlapping spans: one bold run
    assert highlighted("a deploy\nb", [(2, 8)], bold=False) == "a deploy\\nb"


def test_the_search_command_enables_searches_and_runs_through_serve(served, tmp_path):  # noqa: F811
    store, key, _, _ = served
    missing = cli("search", store, "hello")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "cablestore search --enable STORE" in missing.stderr
    assert cli("search", store, "--enable").returncode == 0  # through serve: the served store builds it
    assert cli("post", store, "--key", key, "text", "general", "hello through serve").returncode == 0
    found = cli("search", store, "hello", "--json")
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)["hits"]
    assert [h["text"] for h in hits] == ["hello through serve"] and hits[0]["spans"]
    for channel in ("general", "#general"):  # as `channels` prints it too
        inside = cli("search", store, "hello", "--channel", channel, "--json")
        assert inside.returncode == 0 and [h["text"] for h in json.loads(inside.stdout)["hits"]] == ["hello through serve"], inside.stderr
    nosuch = cli("search", store, "hello", "--channel", "random", "--json")  # a channel the store does not hold is named, not searched
    assert nosuch.returncode == 2 and "ChannelNotFoundError" in nosuch.stdout + nosuch.stderr
    plain = cli("search", store, "hello")
    assert "hello through serve" in plain.stdout and "\x1b[" not in plain.stdout  # not a terminal: no bold
    bad = cli("search", store, "   ")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "QueryError" in bad.stderr and "Traceback" not in bad.stderr
    shown = subprocess.run([sys.executable, "-m", "cablestore", "search", "--help"], capture_output=True, text=True, timeout=60)
    from cablestore.search import query as query_module

    syntax = getattr(query_module, "SYNTAX", "")  # the query language, shown whole
    assert shown.returncode == 0 and "--enable" in shown.stdout and syntax.strip() in shown.stdout


# --- the property: search equals a brute-force scan ------------------------------

WORDS = ("deploy", "failed", "café", "c++20", "hello", "world", "日本語")
QUERIES = ("deploy", "deploy failed", "hello", "c++20", "café world", "日本語")
PEOPLE = (LOCAL, ALICE, BOB)


@st.composite
def workloads(draw):
    made = []
    for _ in range(draw(st.integers(3, 10))):
        kp = draw(st.sampled_from(PEOPLE))
        body = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4)))
        ts = 1000 + draw(st.integers(0, 20))  # equal timestamps happen: the hash breaks ties
        if draw(st.integers(0, 5)) == 0:
            made.append(post(kp, TOPIC, ts, channel=draw(st.sampled_from(["dev", "news"])), topic=body))
        else:
            made.append(text(kp, ts, body, draw(st.sampled_from(["dev", "news"]))))
    for i in range(draw(st.integers(0, 2))):  # an author deletes a post of theirs
        target = draw(st.sampled_from(made))
        made.append(post(keypair_of(target), DELETE, 1100 + i, hashes=(H(target),)))
    for i in range(draw(st.integers(0, 4))):  # the local user moderates
        kind = draw(st.sampled_from(["hide post", "hide user", "drop post", "drop channel", "block"]))
        ts = 1200 + i
        if kind == "hide post":
            made.append(mh.act(LOCAL, HIDE_POST, ts, [H(draw(st.sampled_from(made[:3])))], "dev")[0])
        elif kind == "hide user":
            made.append(mh.act(LOCAL, HIDE_USER, ts, [draw(st.sampled_from(PEOPLE[1:])).public_key])[0])
        elif kind == "drop post":
            made.append(mh.act(LOCAL, DROP_POST, ts, [H(draw(st.sampled_from(made[:3])))], "dev")[0])
        elif kind == "drop channel":
            made.append(mh.act(LOCAL, DROP_CHANNEL, ts, channel="news")[0])
        else:
            made.append(mh.block(LOCAL, draw(st.sampled_from(PEOPLE[1:])), ts, drop=draw(st.integers(0, 1)))[0])
    return made


def keypair_of(buf: bytes):
    return next(kp for kp in PEOPLE if kp.public_key == buf[:32])


def brute_force(store, q: str, include_hidden: bool) -> list[bytes]:
    """What a scan of every stored post finds: the posts ``parse(q).match`` accepts, minus blocked users' and (unless asked) hidden ones."""
    query, blocked = parse(q), store.blocks()
    dropped, dropped_channels = store.dropped_posts(), store.dropped_channels()
    found = []
    for p in store.posts():
        body = p.text if p.post_type == TEXT else p.topic if p.post_type == TOPIC else None
        if not body or query.match(body) is None or p.author in blocked or p.hash in dropped or p.channel.lower() in dropped_channels:
            continue
        if not include_hidden and store.post(p.hash).hidden_by is not None:
            continue
        found.append((p.timestamp, p.hash))
    return [h for _, h in sorted(found, reverse=True)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(workload=workloads(), data=st.data())
def test_search_equals_a_brute_force_scan_under_deletes_drops_blocks_and_hides_in_any_order(tmp_path_factory, workload, data):
    order = data.draw(st.permutations(workload))
    with Store(tmp_path_factory.mktemp("search") / "s", now=lambda: NOW, local_user=LOCAL.public_key, search=True) as s:
        for buf in order:
            try:
                s.ingest(buf)
            except CableError:
                pass
        for q in QUERIES:
            for include_hidden in (False, True):
                got = all_pages(s, q, include_hidden=include_hidden)
                assert got == brute_force(s, q, include_hidden), (q, include_hidden)
                assert not any(s.is_deleted(h) for h in got)
        assert s.check().consistent
