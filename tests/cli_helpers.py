"""Shared fixtures and helpers for the command-line tests (test_cli_arguments, test_cli_errors, test_cli_output)."""

from __future__ import annotations

import pytest

from cablestore.authoring.workload import generate, write_posts
from cablestore.cli import main


@pytest.fixture(scope="module")
def peer(tmp_path_factory):
    """A store of 600 generated posts (some deleted; channels dev-talk, general, ünïcode-☕), the posts file it was ingested from, and a key file."""
    d = tmp_path_factory.mktemp("cli")
    write_posts(d / "posts.bin", generate(seed=2, posts=600))
    assert main(["ingest", str(d / "peer.ldb"), str(d / "posts.bin"), "--quiet"]) == 0
    assert main(["keygen", str(d / "me.key")]) == 0
    return d


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A store of one channel with one post by one member, written through the CLI, and its key file."""
    d = tmp_path_factory.mktemp("home")
    assert main(["keygen", str(d / "me.key")]) == 0
    assert main(["post", str(d / "one.ldb"), "--key", str(d / "me.key"), "text", "general", "hello"]) == 0
    return d


def one_line(err: str) -> str:
    """``err`` is one line, without a traceback: that line."""
    assert err.count("\n") == 1 and err.endswith("\n") and "Traceback" not in err, err
    return err[:-1]


def files(path) -> list[str]:
    """Every path under ``path``: compared before and after to prove a command created nothing."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def parse_help(capsys, argv) -> str:
    """The help text ``argv`` (ending in ``--help``) prints."""
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(argv)
    return capsys.readouterr().out
