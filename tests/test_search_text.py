"""Search's text rules: normalization, index terms, the query language and Query.match.

The property that matters most: whatever ``Query.match`` accepts is indexed
under every conjunct of ``Query.lookups``, so the store's index search never
misses what a brute-force scan with ``match`` finds.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cablestore.errors import QueryError
from cablestore.search import SYNTAX, Lookup, index_terms, normalize, parse
from cablestore.search import text as rules
from cablestore.wire.fields import MAX_TEXT_BYTES

ROOT = Path(__file__).resolve().parent.parent
PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Mixed scripts, punctuation, accents (precomposed and combining), fullwidth and halfwidth forms,
# ligatures, casefolding pairs, NUL, emoji, a character outside the BMP, the query syntax's own characters.
PIECES = [
    "a", "b", "e", "x", "deploy", "dep", "the", "1", "20", "Café", "cafe", "e\u0301", "É", "ß", "SS", "ẞ", "İ", "ﬁ",
    "ŉ", "Ω", "ω", "Ｃ", "＋", "１", "①", "．", "ｶ", "ﾞ", "が", "か", "\u3099", "東", "京", "都", "大阪", "서울", "에",
    "ก", "ิ", "น", "ข้", "हि", "न्", "ʼ", "’", "'", "-", "_", ".", ",", "+", "#", "@", "/", ":", "?", "=", "*", '"', "(",
    ")", " ", " ", "  ", "\n", "\x00", "\u200d", "👍", "\U00010400", "\U00020000", "C++20", "v1.2.3", "https://",
    "in:", "\u0301", "\u1100", "\u314f", "\uffc2", "가",
]
TEXTS = st.one_of(st.lists(st.sampled_from(PIECES), max_size=24).map("".join), st.text(max_size=16))
DECORATIONS = ["{}", "{}", "-{}", '"{}"', '-"{}"', "{}*"]


def _indexed(lookup: Lookup, terms: set[str]) -> bool:
    return lookup.term in terms or (lookup.prefix and any(t.startswith(lookup.term) for t in terms))


def _valid_term(term: str) -> bool:
    return bool(term) and "\x00" not in term and len(term.encode()) <= rules.MAX_TERM_BYTES


@st.composite
def _queries(draw, text: str) -> str:
    """A query from pieces of ``text`` (whole chunks, any slices) and of PIECES, each maybe excluded, quoted or a prefix."""
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.integers(0, 2))
        chunks = text.split()
        if kind == 0 and chunks:
            part = draw(st.sampled_from(chunks))
        elif kind == 1:
            a, b = sorted(draw(st.tuples(st.integers(0, len(text)), st.integers(0, len(text)))))
            part = text[a:b]
        else:
            part = "".join(draw(st.lists(st.sampled_from(PIECES), min_size=1, max_size=3)))
        parts.append(draw(st.sampled_from(DECORATIONS)).format(part))
    return " ".join(parts)


@PROPERTY
@given(st.data())
def test_whatever_match_accepts_is_indexed_under_a_lookup_of_every_conjunct(data):
    text = data.draw(TEXTS, "text")
    query_text = data.draw(_queries(text), "query")
    try:
        query = parse(query_text)
    except QueryError:
        return
    assert query.lookups and all(_valid_term(lk.term) for alternatives in query.lookups for lk in alternatives)
    spans = query.match(text)
    if spans is None:
        return
    terms = index_terms(text)
    for alternatives in query.lookups:
        assert any(_indexed(lk, terms) for lk in alternatives), (alternatives, sorted(terms))
    assert spans == sorted(spans) and all(0 <= a < b <= len(text) for a, b in spans)
    assert all(b1 < a2 for (_, b1), (a2, _) in zip(spans, spans[1:], strict=False))  # not overlapping, not touching


_SYNTAX_CHUNK = re.compile(r'^-|"|\*$|^(in|from|before|after):', re.I)


@PROPERTY
@given(TEXTS)
def test_each_chunk_of_a_text_finds_it(text):
    """Not vacuous: a query made of one whitespace-separated piece of a text matches that text."""
    for chunk in text.split():
        if _SYNTAX_CHUNK.search(chunk):
            continue
        try:
            query = parse(chunk)
        except QueryError:  # nothing to search in it (punctuation, emoji)
            continue
        assert query.match(text) is not None, (chunk, normalize(text))


@PROPERTY
@given(TEXTS)
def test_terms_are_short_have_no_nul_and_normalizing_is_idempotent(text):
    terms = index_terms(text)
    assert all(_valid_term(t) for t in terms)
    assert len(terms) <= 2 * len(normalize(text)[: rules.MAX_NORMALIZED_CHARS])
    once = normalize(text)
    assert normalize(once) == once
    assert index_terms(once) == terms
    pieces = rules._unicode()[1].pieces.finditer(text[: rules.MAX_INDEXED_CHARS])
    assert "".join(normalize(m.group()) for m in pieces) == normalize(text[: rules.MAX_INDEXED_CHARS])  # spans are exact
    doc = rules.Normalized(text)
    for m in doc.cls.word.finditer(doc.text):  # each word maps back to the piece of the text it comes from
        a, b = doc.span(*m.span())
        assert m.group() in normalize(text[a:b])


@PROPERTY
@given(st.text(alphabet=st.characters(max_codepoint=127)))
def test_the_ascii_shortcut_gives_what_the_unicode_rules_give(text):
    bmp, _ = rules._unicode()
    assert index_terms(text) == rules._terms(normalize(text), bmp)
    assert normalize(text) == unicodedata.normalize("NFKC", text.casefold()).replace("\x00", " ")


MATCHES = [
    ("cafe", "Meet at the café", True),
    ("café", "meet at the CAFE", True),
    ("cafe", "meet at the cafe\u0301", True),
    ("Straße", "STRASSE 5", True),
    ("STRASSE", "die Straße", True),
    ("the", "the end", True),
    ("a", "a b", True),
    ("full", "ｆｕｌｌ width", True),
    ("ｆｕｌｌ", "full", True),
    ("deploy friday", "friday we deploy", True),
    ("deploy", "redeploy", False),
    ("deploy", "re-deploy", True),
    ("c++20", "we use C++20.", True),
    ("C++20", "we use c++ 20", False),
    ("C++20", "C++20/C++23 both", False),
    ('"c++20"', "C++20/C++23 both", True),
    ("20", "we use C++20", True),
    ("c++", "I like C++!", True),
    ("v1.2.3", "released (v1.2.3)!", True),
    ("v1.2", "released v1.2.3", False),
    ("v1.2*", "released v1.2.3", True),
    ("#general", "see #general, please", True),
    ("general", "see #general", True),
    ("#general", "general stuff", False),
    ("@alice", "ping @alice:", True),
    ("https://example.org/a?b=1", "link: https://example.org/a?b=1.", True),
    ("example", "<https://example.org/a?b=1>", True),
    ("https://example.org*", "see https://example.org/a?b=1", True),
    ("foo_bar", "call foo_bar()", True),
    ("foo", "call foo_bar()", True),
    ("e-mail", "send an e-mail.", True),
    ("email", "send an e-mail", False),
    ("don't", "I don’t know", True),
    ("京都", "東京都に住んでいます", True),
    ("東京都", "東京都庁", True),
    ("京", "東京", True),
    ("都京", "東京都", False),
    ("ガ", "ｶﾞ", True),
    ("か", "が", False),
    ("서울", "서울에서 만나요", True),
    ("ข้าว", "กินข้าวหรือยัง", True),
    ("depl*", "we deployed it", True),
    ("depl*", "redeploy", False),
    ("東京*", "東京都", True),
    ('"deploy the app"', "Deploy the app!", True),
    ('"deploy the app"', "deploy, the app", True),
    ('"deploy the app"', "deploy an app the", False),
    ('"deploy the app"', "deploy to the app", False),
    ('"東京 都"', "東京都", True),
    ('"ｶaｶ"', "ｶaｶ", True),  # S characters apart are no pair

    ("deploy -friday", "deploy on friday", False),
    ("deploy -friday", "deploy on monday", True),
    ("deploy -fri*", "deploy on friday", False),
    ('deploy -"on friday"', "deploy on friday", False),
    ('deploy -"on friday"', "friday: deploy on monday", True),
    ("file", "a ﬁle", True),
    ("x" * 100, "x" * 100, True),
    ("x" * 100, "x" * 99, False),
]


@pytest.mark.parametrize(("query", "text", "found"), MATCHES)
def test_examples_match_or_not(query, text, found):
    parsed = parse(query)
    assert (parsed.match(text) is not None) == found
    terms = index_terms(text)
    if found:  # and the index finds it
        assert all(any(_indexed(lk, terms) for lk in alternatives) for alternatives in parsed.lookups)


@pytest.mark.parametrize(
    ("query", "text", "spans"),
    [
        ("strasse", "die Straße!", [(4, 10)]),
        ("full", "ｆｕｌｌ", [(0, 4)]),
        ("file", "a ﬁle", [(2, 5)]),
        ("ガ", "xｶﾞ", [(1, 3)]),
        ("가", "x \u1100\uffc2 y", [(2, 4)]),  # a Hangul jamo and a halfwidth vowel make one syllable
        ("가", "\u1100\u314f", [(0, 2)]),  # and a compatibility vowel
        ("cafe", "cafe\u0301!", [(0, 5)]),
        ("deploy friday", "deploy on friday, deploy", [(0, 6), (10, 16), (18, 24)]),
        ('"deploy the app"', "x Deploy the app", [(2, 16)]),
        ("depl*", "we deployed", [(3, 11)]),
        ("京都", "東京都", [(1, 3)]),
        ("c++20", "(C++20)", [(1, 6)]),
    ],
)
def test_spans_are_indices_of_the_original_text(query, text, spans):
    assert parse(query).match(text) == spans


def test_terms_of_a_text():
    assert index_terms("Deploy the app.") == {"deploy", "the", "app"}
    assert index_terms("C++20, #general @alice!") == {"c", "20", "c++20", "general", "#general", "alice", "@alice"}
    assert index_terms("v1.2.3") == {"v1", "2", "3", "v1.2.3"}
    assert index_terms("東京都") == {"東", "京", "都", "東京", "京都"}
    assert index_terms("a\x00b+") == {"a", "b", "b+"}
    assert index_terms("Café ＣＡＦＥ") == {"cafe"}
    assert index_terms("-- :) 👍") == set()


def test_long_terms_are_cut_to_64_bytes_at_a_character_boundary():
    assert index_terms("a" * 100) == {"a" * 64}
    assert index_terms("ж" * 100) == {"ж" * 32}
    assert index_terms("\U00010428" * 20) == {"\U00010428" * 16}
    assert index_terms("ж" * 31 + "abc") == {"ж" * 31 + "ab"}
    assert parse("ж" * 40 + "*").lookups == ((Lookup("ж" * 32, prefix=True),),)
    assert parse("ж" * 40).match("ж" * 40) is not None
    assert rules.MAX_INDEXED_CHARS == MAX_TEXT_BYTES  # a post's text: no more characters than bytes


def test_terms_per_text_are_bounded():
    worst = "東京大阪京都" * 682  # 4092 characters, more than a post/text may hold
    assert len(index_terms(worst)) < 20
    assert len(index_terms(" ".join(str(i) for i in range(2000)))) <= rules.MAX_INDEXED_CHARS
    assert index_terms("x " * 3000 + "tail") == {"x"}  # past the first 4096 characters nothing counts
    arabic = index_terms("\ufdfa " * 1024)  # 4096 bytes, each ﷺ 18 characters once normalized
    assert index_terms("\ufdfa") <= arabic and len(arabic) <= 5  # the four words, and one cut short maybe
    long = "\ufdfa" * 1000 + "needle"
    assert "needle" not in index_terms(long) and parse("needle").match(long) is None  # both cut where NFKC ends


def test_filters():
    q = parse("deploy in:#dev from:alice from:ab12 from:@alice after:2024-05-01 before:2024-05-02T12:30")
    assert (q.channel, q.authors) == ("dev", ("alice", "ab12"))
    assert q.after == int(datetime(2024, 5, 1, tzinfo=UTC).timestamp() * 1000)
    assert q.before == int(datetime(2024, 5, 2, 12, 30, tzinfo=UTC).timestamp() * 1000)
    assert parse('x IN:"two words" before:2024-05-02T12:30:15Z').channel == "two words"
    assert parse("x before:2024-05-02T12:30:15Z").before % 60_000 == 15_000
    assert parse("x in:dev").channel == parse("x in:#dev").channel == "dev"
    assert parse("deploy -friday").excluded == ("friday",)
    assert parse("https://example.org").lookups == ((Lookup("https://example.org"),),)  # not a filter


def test_words_make_lookups():
    assert parse("deploy friday").lookups == ((Lookup("deploy"),), (Lookup("friday"),))
    assert parse("Deploy deploy DEPLOY").lookups == ((Lookup("deploy"),),)
    assert parse("depl*").lookups == ((Lookup("depl", prefix=True),),)
    assert parse("東京都庁").lookups == ((Lookup("東京"),), (Lookup("都庁"),))
    assert parse("東京都").lookups == ((Lookup("東京"),), (Lookup("京都"),))
    assert parse("東").lookups == ((Lookup("東"),),)
    assert parse('"deploy the app"').lookups == ((Lookup("deploy"),), (Lookup("the"),), (Lookup("app"),))


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("", "at least one word"),
        ("   ", "at least one word"),
        ("-deploy", "at least one word"),
        ("in:dev from:alice", "at least one word"),
        ("-- :)", "at least one word"),
        ('"unclosed', "unclosed quote"),
        ('x in:"unclosed', "unclosed quote"),
        ('"a"b', "space after the closing quote"),
        ("deploy in:", "in: needs a value"),
        ("deploy from:", "from: needs a value"),
        ("deploy in:#", "channel name"),
        ("deploy from:@", "name or key prefix"),
        ("deploy from:" + "a" * 65, "name or key prefix"),
        ("deploy in:a in:b", "one in:"),
        ("x before:2024-13-01", "before:2024-13-01: not a date"),
        ("x after:yesterday", "after:yesterday: not a date"),
        ("x before:1969-12-31", "1970"),
        ("x after:2024-05-02 before:2024-05-01", "nothing can match"),
        ("-in:dev x", "cannot be negated"),
        ("*", "prefix needs letters or digits"),
        ("#*", "prefix needs letters or digits"),
        ("d*", "at least 2 characters"),
        ("x" * 1025, "too long"),
        ("deploy \udcff", "not valid Unicode"),
        (" ".join(f"w{i}" for i in range(33)), "too many search terms"),
        ("".join(map(chr, range(0x4E00, 0x4E46))), "too many search terms"),  # 70 characters: 35 pairs
    ],
)
def test_bad_queries_get_one_line_naming_the_problem(query, says):
    with pytest.raises(QueryError) as caught:
        parse(query)
    message = str(caught.value)
    assert says in message and "\n" not in message and "--" not in message


def test_a_one_character_cjk_prefix_is_allowed():
    assert parse("東*").match("東京") == [(0, 1)]


def test_whitespace_is_one_thing_for_split_and_for_the_spans():
    everything = "".join(map(chr, range(0x3100)))  # every whitespace character is below U+3100
    assert everything.split() == re.findall(r"\S+", everything)


def test_every_accented_character_takes_the_accent_path():
    """normalize skips NFD for text without characters from these blocks; no accented character is outside them."""
    missed = []
    for cp in range(0x80, 0x10000):
        ch = chr(cp)
        if unicodedata.normalize("NFC", ch) == ch and rules._ACCENTS.search(unicodedata.normalize("NFD", ch)):
            if not rules._MAYBE_ACCENTED.match(ch):
                missed.append(hex(cp))
    assert not missed


def test_the_syntax_is_in_the_docs():
    doc = (ROOT / "docs" / "search.md").read_text()
    assert all(line in doc for line in SYNTAX.splitlines())
    assert 8 <= len(SYNTAX.splitlines()) <= 16
