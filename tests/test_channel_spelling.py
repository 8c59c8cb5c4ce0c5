"""One spelling per channel, for authoring, `channels` and the channel lists `serve` answers.

cable-core.js 0.2.1 compares channel names exactly: a cable-cli user in `Dev-Talk` never sees a post to
`dev-talk`.  The store keeps one channel whatever the spelling, and writes and lists it as its earliest
post/text or post/topic spells it (cablestore.store.read.spelling).
"""

from __future__ import annotations

import json

import pytest

from cablestore import Store, decode_post
from cablestore.authoring.author import Author
from cablestore.cli import main
from cablestore.errors import QueryError
from cablestore.wire.codec import DELETE, JOIN, TEXT, TOPIC

from .conftest import NOW, keypair, post

T0 = NOW - 60_000


def _cabal(s: Store) -> None:
    a, b = keypair("alice"), keypair("bob")
    s.ingest(post(b, JOIN, T0 - 5, channel="dev-talk"))  # a join, earlier, spelled otherwise
    s.ingest(post(a, TEXT, T0, channel="Dev-Talk", text="created in cable-cli"))
    s.ingest(post(b, TEXT, T0 + 10, channel="DEV-TALK", text="later, another spelling"))


def test_the_author_writes_in_the_spelling_the_channel_uses(store):
    _cabal(store)
    me = Author(store, keypair("carol"), now=lambda: NOW)
    for write in (lambda: me.text("dev-talk", "hi"), lambda: me.join("DEV-talk"), lambda: me.topic("dev-talk", "t")):
        assert decode_post(store.get(write())).channel == "Dev-Talk"
    assert store.channel_list() == ["dev-talk"]  # one channel, as ever


def test_the_author_writes_a_new_channel_as_given_and_as_given_when_told(store):
    _cabal(store)
    me = Author(store, keypair("carol"), now=lambda: NOW)
    assert decode_post(store.get(me.text("Brand-New", "hi"))).channel == "Brand-New"
    exact = Author(store, keypair("carol"), now=lambda: NOW, exact_channel=True)
    assert decode_post(store.get(exact.text("dev-talk", "insisting"))).channel == "dev-talk"
    assert store.listed_spellings(["dev-talk", "brand-new"]) == ["Dev-Talk", "Brand-New"]


def test_one_rule_for_the_store_the_peer_and_channels(store):
    _cabal(store)
    assert store.listed_spellings(["dev-talk"]) == ["Dev-Talk"]  # what serve lists (peer.serving asks the store)
    assert [c.spelling for c in store.channels()] == ["Dev-Talk"]
    assert store.channels()[0].to_dict()["spelling"] == "Dev-Talk" and store.channels()[0].name == "dev-talk"


def test_a_delete_listed_first_in_the_time_range_is_stepped_over(store):
    a = keypair("alice")
    gone = post(a, TEXT, T0 + 5, channel="dev-talk", text="soon deleted")
    store.ingest(gone)
    from cablestore import post_hash

    store.ingest(post(a, DELETE, T0 + 6, hashes=[post_hash(gone)]))
    store.ingest(post(a, TEXT, T0 + 7, channel="Dev-Talk", text="kept"))
    store.ingest(post(a, TOPIC, T0 + 20, channel="DEV-talk", topic="t"))
    assert store.listed_spellings(["dev-talk"]) == ["Dev-Talk"]


def test_listed_spellings_refuses_one_string(store):
    with pytest.raises(QueryError):
        store.listed_spellings("dev-talk")


def test_the_cli_writes_and_shows_the_spelling_and_exact_channel_insists(tmp_path, capsys):
    path, keyfile = tmp_path / "s.ldb", str(tmp_path / "k")
    with Store(path, now=lambda: NOW) as s:
        _cabal(s)
    assert main(["keygen", keyfile]) == 0
    assert main(["post", str(path), "--key", keyfile, "text", "dev-talk", "hello"]) == 0
    assert main(["post", str(path), "--key", keyfile, "--exact-channel", "text", "dev-talk", "as typed"]) == 0
    capsys.readouterr()
    assert main(["channels", str(path)]) == 0
    assert capsys.readouterr().out.startswith("#Dev-Talk ")
    assert main(["channels", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["channels"][0]["spelling"] == "Dev-Talk"
    with Store(path) as s:
        spelled = {m.text: m.channel for m in s.messages("dev-talk")}
    assert spelled["hello"] == "Dev-Talk" and spelled["as typed"] == "dev-talk"
