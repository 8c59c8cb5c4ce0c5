"""Users named one way everywhere: a full key, a unique hex prefix of 8+ digits or a unique name
(Store.resolve_user), in every moderation command, search from: and the web; ambiguous or unknown: one line."""

from __future__ import annotations

import pytest

from cablestore import Store
from cablestore.cli import main
from cablestore.errors import UserNotFoundError


@pytest.fixture
def cabal(tmp_path, capsys):
    path = str(tmp_path / "s.ldb")
    keys = {}
    for who in ("boss", "mal", "twin1", "twin2"):
        keys[who] = str(tmp_path / f"{who}.key")
        assert main(["keygen", keys[who]]) == 0
    names = {"boss": "boss", "mal": "mallory", "twin1": "Sam", "twin2": "sam"}
    for who, name in names.items():
        assert main(["post", path, "--key", keys[who], "name", name]) == 0
    for i in range(3):
        assert main(["post", path, "--key", keys["mal"], "text", "general", f"spam {i}"]) == 0
    capsys.readouterr()
    with Store(path, readonly=True) as s:
        pks = {who: next(u.public_key for u in s.users() if u.name == names[who]) for who in names}
    return path, keys, pks


def test_resolve_user_takes_a_key_a_prefix_or_a_name(cabal):
    path, _, pks = cabal
    with Store(path, readonly=True) as s:
        assert s.resolve_user(pks["mal"].hex()) == pks["mal"] == s.resolve_user(pks["mal"])
        assert s.resolve_user(pks["mal"].hex()[:8]) == pks["mal"] == s.resolve_user("MALLORY") == s.resolve_user("@mallory")
        with pytest.raises(UserNotFoundError, match="a key's prefix has 8"):
            s.resolve_user(pks["mal"].hex()[:7])
        with pytest.raises(UserNotFoundError) as exc:
            s.resolve_user("sam")
        text = str(exc.value)
        assert "names 2 users" in text and f"[{pks['twin1'].hex()[:8]}]" in text and f"[{pks['twin2'].hex()[:8]}]" in text
        with pytest.raises(UserNotFoundError, match="no user 'nobody'"):
            s.resolve_user("nobody")


def test_block_by_name_says_what_it_did(cabal, capsys):
    path, keys, pks = cabal
    assert main(["block", path, "--key", keys["boss"], "mallory", "--drop"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"blocked mallory [{pks['mal'].hex()[:8]}]: 4 posts dropped"  # 3 texts and the post/info
    assert out[1].startswith("this key's owner is now the store's local user")
    assert main(["unblock", path, "--key", keys["boss"], pks["mal"].hex()[:10]]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("unblocked ") and not any("local user" in line for line in out)


def test_every_moderation_command_takes_users_as_positionals(cabal, capsys):
    path, keys, pks = cabal
    label = f"[{pks['mal'].hex()[:8]}]"
    for argv, said in (
        (["role", path, "--key", keys["boss"], "mallory", "mod", "--channel", "general"], f"mallory {label} is now a mod in #general"),
        (["hide", path, "--key", keys["boss"], "mallory"], f"hid mallory {label} in the whole cabal"),
        (["unhide", path, "--key", keys["boss"], "--user", "mallory"], f"unhid mallory {label} in the whole cabal"),
        (["block", path, "--key", keys["boss"], pks["mal"].hex()[:8]], f"blocked mallory {label}"),
    ):
        assert main(argv) == 0, argv
        assert capsys.readouterr().out.splitlines()[0] == said
    assert main(["moderation", path]) == 0
    out = capsys.readouterr().out
    assert f"blocked: mallory {label}" in out and "for local user boss [" in out


@pytest.mark.parametrize("who", ["sam", "nobody", "1234"])
def test_an_ambiguous_or_unknown_user_is_one_line_and_exit_2(cabal, capsys, who):
    path, keys, _ = cabal
    assert main(["hide", path, "--key", keys["boss"], who]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("cablestore hide: UserNotFoundError:")


def test_search_from_names_one_user_and_hits_are_labelled(cabal, capsys):
    path, _, pks = cabal
    assert main(["search", path, "--enable"]) == 0
    capsys.readouterr()
    assert main(["search", path, "spam", "from:mallory"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all(f"mallory [{pks['mal'].hex()[:8]}]" in line for line in lines)
    assert main(["search", path, "spam", "from:sam"]) == 2
    assert "names 2 users" in capsys.readouterr().err
