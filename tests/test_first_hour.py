"""Smaller things a new user trips over: the demo says it deletes its temporary store, the bot docs warn that a
bot's feed holds its own posts and stop on Ctrl-C without a traceback, `search --cursor bogus` speaks the CLI's words."""

from __future__ import annotations

import re
from pathlib import Path

from cablestore.cli import main
from cablestore.demo import run_demo

ROOT = Path(__file__).resolve().parent.parent


def test_the_demo_says_it_deletes_its_temporary_store():
    said = []
    report = run_demo(None, posts=20, seed=1, quiet=False, engine="local", out=lambda *a: said.append(" ".join(map(str, a))))
    assert report["ok"]
    (line,) = [s for s in said if s.startswith("deleted the temporary store ")]
    assert not Path(line.split()[4]).exists()


def test_the_bot_docs_warn_of_its_own_posts_and_catch_ctrl_c():
    doc = (ROOT / "docs" / "embedding.md").read_text()
    assert "A bot's feed includes its own posts." in doc and "post.author == key.public_key" in doc
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", doc, re.S) if 'Store("bot.ldb")' in b]
    assert "except KeyboardInterrupt" in block


def test_a_bad_cursor_names_the_option_not_the_python_api(tmp_path, capsys):
    store, key = str(tmp_path / "s.ldb"), str(tmp_path / "k")
    assert main(["keygen", key]) == 0 and main(["post", store, "--key", key, "text", "general", "hi"]) == 0
    assert main(["search", store, "--enable"]) == 0
    capsys.readouterr()
    assert main(["search", store, "hi", "--cursor", "bogus"]) == 2
    err = capsys.readouterr().err
    assert "--cursor" in err and "SearchPage" not in err


def test_search_in_an_unknown_channel_is_an_error_and_no_cursor_follows_no_match(tmp_path, capsys):
    store, key = str(tmp_path / "s.ldb"), str(tmp_path / "k")
    assert main(["keygen", key]) == 0 and main(["post", store, "--key", key, "text", "general", "hi"]) == 0
    assert main(["search", store, "--enable"]) == 0
    capsys.readouterr()
    assert main(["search", store, "hi", "in:nosuch"]) == 2
    assert "ChannelNotFoundError" in capsys.readouterr().err
    assert main(["search", store, "nothing"]) == 0
    assert capsys.readouterr().out == "no posts match\n"
