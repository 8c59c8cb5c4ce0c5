"""A served store takes every command: export and ingest run through `serve`; the commands that need the store
alone (reindex, migrate, recover, check --repair) say "stop serve first", in the same words each."""

from __future__ import annotations

import json

import pytest

from .conftest import stop
from .test_control import cli, served  # noqa: F401  (the fixture: a real `serve` process on a store)


def test_export_and_ingest_run_through_serve(served, tmp_path):  # noqa: F811
    store, key, port, proc = served
    assert cli("generate", "--posts", "20", tmp_path / "w.posts").returncode == 0
    ingested = cli("ingest", store, tmp_path / "w.posts", "--json")
    assert ingested.returncode == 0, ingested.stderr
    assert json.loads(ingested.stdout)["new"] == 20
    exported = cli("export", store, "snap", "--json", cwd=tmp_path)  # a relative DIR: the client's directory, not serve's
    assert exported.returncode == 0, exported.stderr
    assert json.loads(exported.stdout)["posts"] >= 20 and (tmp_path / "snap").is_dir()
    stats = json.loads(cli("stats", store, "--json").stdout)
    assert stats["posts"] == json.loads(exported.stdout)["posts"]
    assert stop(proc) == 0


@pytest.mark.parametrize("argv, command", [
    (["reindex"], "reindex"), (["migrate"], "migrate"), (["recover"], "recover"), (["check", "--repair"], "check --repair"),
])
def test_commands_needing_the_store_alone_say_stop_serve_first(served, argv, command):  # noqa: F811
    store, *_ = served
    out = cli(argv[0], store, *argv[1:])
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.strip() == (
        f"cablestore {argv[0]}: StoreLockedError: {store} is held by a running `cablestore serve`; {command} needs the store to itself: stop serve first"
    )
