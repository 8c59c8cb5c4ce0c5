"""Arguments as people type them: options among positionals, ``--``, ``-word`` exclusions and unquoted texts,
and a usage error that is the command's own (its name and its usage, never the top level's)."""

from __future__ import annotations

import pytest

from cablestore import Store
from cablestore.cli import main


@pytest.fixture
def store(tmp_path, capsys):
    path, key = str(tmp_path / "s.ldb"), str(tmp_path / "me.key")
    assert main(["keygen", key]) == 0
    assert main(["post", path, "--key", key, "text", "general", "hello", "world"]) == 0  # unquoted, options first
    assert main(["post", path, "text", "general", "cable", "tea", "time", "--key", key]) == 0  # options last
    assert main(["post", path, "text", "general", "--key", key, "cable", "-lol"]) == 0  # an option among the words, a -word
    assert main(["search", path, "--enable"]) == 0
    capsys.readouterr()
    return path, key


def test_unquoted_texts_are_one_text(store):
    with Store(store[0], readonly=True) as s:
        assert sorted(m.text for m in s.messages("general")) == ["cable -lol", "cable tea time", "hello world"]


def test_search_takes_options_anywhere_and_minus_words_as_exclusions(store, capsys):
    assert main(["search", store[0], "--limit", "3", "cable", "tea"]) == 0
    out = capsys.readouterr().out
    assert "cable tea time" in out and "-lol" not in out
    assert main(["search", store[0], "cable", "-tea"]) == 0
    out = capsys.readouterr().out
    assert "cable -lol" in out and "tea time" not in out
    assert main(["search", store[0], "cable", "--limit", "1"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 2  # one hit and its `more:` cursor


def test_double_dash_ends_options(store, capsys):
    assert main(["post", store[0], "--key", store[1], "text", "general", "--", "--json", "is", "text"]) == 0
    capsys.readouterr()
    with Store(store[0], readonly=True) as s:
        assert "--json is text" in [m.text for m in s.messages("general")]


@pytest.mark.parametrize("argv, command", [
    (["search", "{s}", "hello", "--limt", "3"], "search"),
    (["show", "{s}", "general", "extra"], "show"),
    (["hide", "{s}", "--key", "{k}", "--bogus"], "hide"),
    (["post", "{s}", "--key", "{k}", "join", "general", "extra"], "post store join"),  # argparse names a KIND after its parent's positionals
])
def test_a_usage_error_names_the_command_and_shows_its_usage(store, capsys, argv, command):
    with pytest.raises(SystemExit) as exc:
        main([a.replace("{s}", store[0]).replace("{k}", store[1]) for a in argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: cablestore {command} ") and f"cablestore {command}: error: unrecognized arguments" in err
    assert "COMMAND" not in err  # not the top level's usage


def test_hide_takes_a_user_positional_after_options(store, capsys):
    with Store(store[0], readonly=True) as s:
        me = s.messages("general")[0].author
    assert main(["hide", store[0], "--key", store[1], me.hex()[:8]]) == 0
    assert "hid (no name) [" + me.hex()[:8] + "] in the whole cabal" in capsys.readouterr().out
