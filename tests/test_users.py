"""`cablestore users` and Store.users(): every known user, and names that collide told apart."""

from __future__ import annotations

import json

from cablestore import Store
from cablestore.cli import main
from cablestore.store.read.users import labels
from cablestore.wire.codec import INFO, JOIN, MOD, TEXT

from .conftest import NOW, keypair, post
from .moderation_helpers import block, hide, role

ME, SAM1, SAM2, CAROL, DAVE, EVE = (keypair(n) for n in ("me", "sam one", "sam two", "carol", "dave", "eve"))
T0 = NOW - 60_000


def _store(path) -> Store:
    s = Store(path, now=lambda: NOW, local_user=ME.public_key)
    for p in (
        post(SAM1, INFO, T0, info=[("name", "sam")]),
        post(SAM2, INFO, T0, info=[("name", "Sam"), ("accept-role", 0)]),
        post(CAROL, INFO, T0, info=[("name", "carol")]),
        post(SAM1, JOIN, T0 + 1, channel="dev"),
        post(SAM1, TEXT, T0 + 2, channel="dev", text="from the first sam"),
        post(SAM2, TEXT, T0 + 3, channel="dev", text="from the second sam"),
        post(DAVE, TEXT, T0 + 4, channel="dev", text="no name"),
        role(ME, CAROL, MOD, T0 + 5, channel="dev")[0],
        hide(ME, DAVE, T0 + 6)[0],
        block(ME, EVE, T0 + 7, drop=1)[0],  # eve: no post, named by a block only
    ):
        s.ingest(p)
    return s


def test_every_known_user_with_roles_hides_blocks_and_posts(tmp_path):
    with _store(tmp_path / "s") as s:
        users = {u.public_key: u for u in s.users()}
    assert set(users) == {k.public_key for k in (ME, SAM1, SAM2, CAROL, DAVE, EVE)}
    carol, dave, eve, sam2 = (users[k.public_key] for k in (CAROL, DAVE, EVE, SAM2))
    assert carol.roles == {"dev": "mod"} and carol.name == carol.label == "carol" and carol.posts == 1
    assert dave.hidden_in == ("",) and dave.name is None and dave.label == DAVE.public_key.hex()[:8] and dave.posts == 1
    assert eve.blocked == {"drop": 1, "notify": 0} and eve.posts == 0
    assert sam2.accept_role == 0 and users[SAM1.public_key].accept_role is None and users[SAM1.public_key].posts == 3
    assert users[ME.public_key].roles == {"": "admin", "dev": "admin"} and users[ME.public_key].posts == 3


def test_names_that_collide_get_enough_key_to_tell_them_apart(tmp_path):
    with _store(tmp_path / "s") as s:
        shown = s.user_labels([SAM1.public_key, SAM2.public_key, CAROL.public_key])
    assert shown[SAM1.public_key] == f"sam [{SAM1.public_key.hex()[:8]}]"
    assert shown[SAM2.public_key] == f"Sam [{SAM2.public_key.hex()[:8]}]"  # casefolded, they look alike
    assert shown[CAROL.public_key] == "carol"
    a, b = bytes.fromhex("abcdef01" + "11" + "00" * 27), bytes.fromhex("abcdef01" + "22" + "00" * 27)
    assert labels({a: "x", b: "x"}) == {a: "x [abcdef0111]", b: "x [abcdef0122]"}


def test_users_show_and_moderation_in_the_cli(tmp_path, capsys):
    _store(tmp_path / "s").close()
    path = str(tmp_path / "s")
    assert main(["users", path, "--json"]) == 0
    listed = {u["public_key"]: u for u in json.loads(capsys.readouterr().out)["users"]}
    assert listed[CAROL.public_key.hex()]["roles"] == {"dev": "mod"} and listed[EVE.public_key.hex()]["blocked"]["drop"] == 1
    assert listed[DAVE.public_key.hex()]["hidden_in"] == ["(cabal)"]
    assert main(["users", path]) == 0
    out = capsys.readouterr().out
    assert f"{SAM1.public_key.hex()}  sam [{SAM1.public_key.hex()[:8]}]  3 posts" in out and "mod in #dev" in out
    assert main(["show", path, "dev", "--all"]) == 0
    out = capsys.readouterr().out
    assert f"sam [{SAM1.public_key.hex()[:8]}]" in out and f"Sam [{SAM2.public_key.hex()[:8]}]" in out
    assert main(["moderation", path]) == 0
    assert f"roles in #dev: mod carol [{CAROL.public_key.hex()[:8]}]" in capsys.readouterr().out  # who, by name and label
