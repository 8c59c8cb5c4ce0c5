"""The moderation seed (moderation.md §4.7): default roles a local user joins with, part of the moderation state."""

from __future__ import annotations

import pytest

from cablestore import Store
from cablestore.errors import ArgumentError
from cablestore.moderation import format_seed, parse_seed
from cablestore.rebuild import export, verify

from .conftest import NOW
from .moderation_helpers import ADMIN, ALEPH, BERT, CASHEW, EVE, MOD, URSULA, XU, hide, role

T0 = 1_700_000_000_000
# §4.7.3's three users, with the roles numbered as §5.1.2 numbers them (0 admin, 1 mod)
SPEC_KEYS = [
    bytes.fromhex("c869744624581c4a7dfd0452f1b70dd4289fd14245eeb0a0c2b3a87f0e3a5b9d"),
    bytes.fromhex("656f9b6195035a063dd1f1f50def3a5a6ee19005384c49e1740df7dc192f722f"),
    bytes.fromhex("1f03bd1d7430e5d47cf197d0ec412707a7e211ee7d45f298bf596378dd4c14a4"),
]


def test_the_spec_example_seed_is_99_bytes_and_reads_back():
    data = b"\x00" + SPEC_KEYS[0] + b"\x00" + SPEC_KEYS[1] + b"\x01" + SPEC_KEYS[2]
    assert len(data) == 99
    assert parse_seed(data) == {SPEC_KEYS[0]: ADMIN, SPEC_KEYS[1]: ADMIN, SPEC_KEYS[2]: MOD}
    assert parse_seed(format_seed(parse_seed(data))) == parse_seed(data)


@pytest.mark.parametrize(
    "data, why",
    [
        (b"", "empty"),
        (b"\x00" + bytes(31), "32-byte public key"),
        (b"\x03" + bytes(32), "role 3"),
        (b"\x00" + bytes(32) + b"\x01" + bytes(32), "assigned twice"),
        (b"".join(b"\x01" + bytes([i]) * 32 for i in range(17)), "more than 16"),
    ],
)
def test_a_bad_seed_is_refused(data, why):
    with pytest.raises(ArgumentError, match=why):
        parse_seed(data)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "s", now=lambda: NOW, local_user=URSULA.public_key) as s:
        yield s


def test_a_seed_gives_default_roles_without_a_post_and_its_users_moderate_whenever_they_posted(store):
    early_hide = hide(ALEPH, XU, T0)  # before anyone made Aleph anything
    store.ingest_many([early_hide[0], role(ALEPH, BERT, MOD, T0 + 1)[0]])
    assert ALEPH.public_key not in store.roles() and XU.public_key not in store.hidden_users()
    posts = len(store)
    store.set_seed(format_seed({ALEPH.public_key: ADMIN, CASHEW.public_key: MOD}))
    assert len(store) == posts  # no post/role is created (§4.7.2)
    assert store.roles()[ALEPH.public_key] == "admin" and store.roles()[CASHEW.public_key] == "mod"
    assert store.roles_from_seed() == {ALEPH.public_key, CASHEW.public_key}
    assert store.roles()[BERT.public_key] == "mod"  # a seeded admin's role posts apply, whenever authored
    assert XU.public_key in store.hidden_users()  # ...and so do their actions
    assert store.seed() == {ALEPH.public_key: "admin", CASHEW.public_key: "mod"}
    assert store.check().consistent


def test_an_admin_can_give_a_seeded_user_another_role(store):
    store.set_seed(format_seed({ALEPH.public_key: ADMIN}))
    store.ingest(role(URSULA, ALEPH, MOD, T0)[0])
    assert store.roles()[ALEPH.public_key] == "mod" and store.roles_from_seed() == set()
    assert store.check().consistent


def test_clearing_the_seed_undoes_its_roles_but_not_what_its_users_did(store):
    store.set_seed(format_seed({ALEPH.public_key: ADMIN}))
    store.ingest_many([hide(ALEPH, XU, T0)[0], role(ALEPH, EVE, MOD, T0 + 1)[0]])
    assert XU.public_key in store.hidden_users() and store.roles()[EVE.public_key] == "mod"
    store.clear_seed()
    assert store.seed() == {} and ALEPH.public_key not in store.roles()
    assert XU.public_key in store.hidden_users()  # applied actions stay applied after a revoke (§4.7.2)
    assert store.roles()[EVE.public_key] == "mod"
    assert store.check().consistent
    store.ingest(hide(ALEPH, BERT, T0 + 2)[0])  # what they do after the revoke: a normal user's action
    assert BERT.public_key not in store.hidden_users()


def test_both_rebuild_paths_verify_the_seed(store, tmp_path):
    store.set_seed(format_seed({ALEPH.public_key: ADMIN}))
    store.ingest(hide(ALEPH, XU, T0)[0])
    assert store.check().consistent
    export(store.db, tmp_path / "snap", partitions=2)
    assert verify("local", snapshot=tmp_path / "snap").consistent  # the export carries the seed
    store.db.delete(next(k for k, _ in store.items(b"!roles!r")))  # a seeded role row lost
    report = store.check()
    assert not report.consistent
    assert store.check(fix=True).consistent and store.roles()[ALEPH.public_key] == "admin"


def test_a_seeded_user_is_a_known_user_for_authenticated_connections(store):
    assert not store.known_user(CASHEW.public_key)  # no post, no block names them
    store.set_seed(format_seed({CASHEW.public_key: MOD}))
    assert store.known_user(CASHEW.public_key)  # a handshake with their key identifies them
