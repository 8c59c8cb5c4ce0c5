"""post/info's accept-role is a varint, 0 or 1 (wire.md §6.2.4), as cable.js 0.2.1 writes and checks it.

The vectors in tests/data/cable-js-0.2.1-accept-role.json were written by cable.js 0.2.1's own
``INFO_POST.create`` with ``interop/info_vectors.js`` (see tests/data/README.md).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from cablestore import Keypair, Store, decode_post, encode_post, make_post, verify_post
from cablestore.authoring.author import Author
from cablestore.cli import main
from cablestore.errors import LimitError, PostFieldError
from cablestore.wire.codec import INFO, decode_post_py

VECTORS = json.loads((Path(__file__).parent / "data" / "cable-js-0.2.1-accept-role.json").read_text())
POSTS = [k for k in VECTORS if k.startswith("info post") and not k.endswith(" binary")]
REFUSED = VECTORS["refused by parsePost"]


def key(name: str) -> Keypair:
    """The vectors' keys: crypto_sign_seed_keypair(BLAKE2b-256("cablestore moderation vector key <name>"))."""
    return Keypair.from_seed(hashlib.blake2b(f"cablestore moderation vector key {name}".encode(), digest_size=32).digest())


def test_the_vectors_cover_both_values_with_and_without_a_name():
    assert len(POSTS) == 4 and len(REFUSED) == 5
    assert {dict(VECTORS[n]["info"])["accept-role"] for n in POSTS} == {0, 1}
    assert sum("name" in dict(VECTORS[n]["info"]) for n in POSTS) == 2


@pytest.mark.parametrize("name", POSTS)
@pytest.mark.parametrize("decode", [decode_post, decode_post_py], ids=["decode_post", "pure"])
def test_cable_js_opt_outs_decode_and_reencode_byte_identically(name, decode):
    want, buf = VECTORS[name], bytes.fromhex(VECTORS[name + " binary"])
    post = decode(buf)
    parsed = dict(want["info"])
    assert post.accept_role == parsed["accept-role"]
    assert post.info_value("accept-role") == chr(parsed["accept-role"])  # the raw one-byte value
    assert post.info_value("name") == parsed.get("name")
    assert [k for k, _ in post.info] == [k for k, _ in want["info"]]
    assert post.timestamp == want["timestamp"] and [h.hex() for h in post.links] == want["links"]
    assert encode_post(post) == buf and verify_post(buf)


@pytest.mark.parametrize("name", POSTS)
def test_make_post_writes_cable_js_bytes_from_the_integer(name):
    want = VECTORS[name]
    buf, made = make_post(key(want["author"]), INFO, want["timestamp"], [bytes.fromhex(h) for h in want["links"]], info=[tuple(p) for p in want["info"]])
    assert buf.hex() == VECTORS[name + " binary"]
    assert made.accept_role == dict(want["info"])["accept-role"]


def test_an_authored_opt_out_keeps_the_name_and_is_cable_js_bytes(tmp_path):
    clock = iter([1700000000099, 1700000000102])
    with Store(tmp_path / "s") as store:
        me = Author(store, key("alice"), now=lambda: next(clock))
        me.name("alice")
        h = me.accept_role(0)
        assert store.get(h).hex() == VECTORS["info post name and accept-role 0 binary"]
        assert store.post(h).to_dict()["info"] == {"name": "alice", "accept-role": 0}
        assert store.name(key("alice").public_key) == "alice"


def test_an_opt_out_written_alone_is_cable_js_bytes(tmp_path):
    with Store(tmp_path / "s") as store:
        h = Author(store, key("alice"), now=lambda: 1700000000100).info([("accept-role", False)])
        assert store.get(h).hex() == VECTORS["info post accept-role 0 binary"]


@pytest.mark.parametrize("case", sorted(REFUSED))
@pytest.mark.parametrize("decode", [decode_post, decode_post_py], ids=["decode_post", "pure"])
def test_what_cable_js_refuses_is_refused(case, decode):
    buf = bytes.fromhex(REFUSED[case]["binary"])
    with pytest.raises(LimitError, match="accept-role"):
        decode(buf)


@pytest.mark.parametrize("value", ["0", "1", 2, -1, "\x02"])
def test_a_value_cable_js_would_not_write_is_not_written(value):
    with pytest.raises((LimitError, PostFieldError)):
        make_post(key("alice"), INFO, 5, info=[("accept-role", value)])


def test_a_post_info_without_accept_role_has_none_and_name_is_text():
    buf, _ = make_post(key("alice"), INFO, 5, info=[("name", "0")])
    assert decode_post(buf).accept_role is None and decode_post(buf).info_value("name") == "0"


def test_the_cli_writes_an_opt_out_keeping_the_name(tmp_path, capsys):
    store, keyfile = str(tmp_path / "s.ldb"), str(tmp_path / "me.key")
    assert main(["keygen", keyfile, "--json"]) == 0
    me = bytes.fromhex(json.loads(capsys.readouterr().out)["public_key"])
    assert main(["post", store, "--key", keyfile, "name", "ripple"]) == 0
    assert main(["post", store, "--key", keyfile, "--json", "accept-role", "0"]) == 0
    printed = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert printed["info"] == {"name": "ripple", "accept-role": 0}
    with Store(store) as s:
        latest = s.post(s.author_posts(me, INFO)[0])
        assert decode_post(latest.raw).accept_role == 0 and s.name(me) == "ripple"
    with pytest.raises(SystemExit) as exited:  # argparse: 0 or 1 only
        main(["post", store, "--key", keyfile, "accept-role", "2"])
    assert exited.value.code == 2
