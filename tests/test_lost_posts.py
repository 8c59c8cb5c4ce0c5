"""Posts ``recover`` finds gone are named with what survives of them, written in full to lost/<run>/LOST.json,
listed again by a later ``recover`` and by ``check`` until a sync brings them back; errors on a damaged store name
the user's store, never a read-only open's temporary directory."""

from __future__ import annotations

import json
from pathlib import Path

from cablestore import Store
from cablestore.authoring.workload import generate
from cablestore.cli import main
from cablestore.keyspace.keys import LOST, canonical_channel
from cablestore.recovery.recovering import recover
from cablestore.wire.codec import CHANNEL_TYPES, post_hash

NOW = 1_900_000_000_000


def _damaged(path: Path) -> list[bytes]:
    """A store of tables with the back half of its largest table cut off: some posts are gone for good."""
    posts = generate(seed=8, posts=3000)
    with Store(path, now=lambda: NOW, verify_signatures=False) as s:
        s.ingest_many(posts)
    table = max(path.glob("*.ldb"), key=lambda f: f.stat().st_size)
    data = table.read_bytes()
    table.write_bytes(data[: len(data) // 2])
    return posts


def test_recover_names_each_lost_post_and_keeps_the_full_list_under_lost(tmp_path):
    path = tmp_path / "s"
    posts = _damaged(path)
    report = recover(path)
    assert report.lost, "half a table cut off loses posts"
    by_hash = {post_hash(p): p for p in posts}
    assert {bytes.fromhex(h) for h in report.lost} <= set(by_hash)  # only posts the store held
    lost_file = Path(report.lost_file)
    assert lost_file.parent == Path(report.originals) and lost_file.name == "LOST.json"
    written = json.loads(lost_file.read_text())
    assert written["count"] == len(report.lost) and sorted(p["hash"] for p in written["lost"]) == report.lost
    described = [p for p in written["lost"] if p["author"] is not None]
    assert described, "the surviving !author! keys describe lost posts"
    for p in described:  # what is said of a post is what it was
        from cablestore.wire.codec import decode_post

        post = decode_post(by_hash[bytes.fromhex(p["hash"])])
        assert p["author"] == post.public_key.hex() and p["timestamp"] == post.timestamp
        assert p["channel"] == (canonical_channel(post.channel) if post.post_type in CHANNEL_TYPES else None), (p, post)
    assert sorted(p["hash"] for p in report.lost_posts) == report.lost


def test_a_later_recover_and_check_list_the_lost_posts_until_a_sync_brings_them_back(tmp_path, capsys):
    path = tmp_path / "s"
    posts = _damaged(path)
    first = recover(path)
    lost = set(first.lost)
    again = recover(path)
    assert again.intact and not again.lost  # nothing new is lost ...
    assert {p["hash"] for p in again.lost_posts} == lost  # ... and what was lost is still listed
    assert main(["check", str(path), "--json"]) == 0
    assert {p["hash"] for p in json.loads(capsys.readouterr().out)["lost_posts"]} == lost
    back = [p for p in posts if post_hash(p).hex() in lost]
    with Store(path, now=lambda: NOW) as s:  # a sync brings them back (they are offered as a peer would)
        s.ingest_many(back[: len(back) // 2])
        still = {p["hash"] for p in s.lost_posts()}
    assert still == lost - {post_hash(p).hex() for p in back[: len(back) // 2]}
    assert main(["check", str(path), "--repair", "--json"]) == 0
    assert {p["hash"] for p in json.loads(capsys.readouterr().out)["lost_posts"]} == still
    with Store(path, create=False, readonly=True) as s:  # the repair dropped the rows of the posts held again
        assert {k[len(LOST) :].hex() for k, _ in s.items(LOST)} == still


def test_the_recover_text_report_says_when_where_and_who(tmp_path, capsys):
    path = tmp_path / "s"
    _damaged(path)
    assert main(["recover", str(path)]) in (0, 1)
    out = capsys.readouterr().out
    assert "LOST" in out and "LOST.json" in out and " UTC " in out


def test_an_error_on_a_damaged_store_names_the_users_store_not_a_temporary_directory(tmp_path, capsys):
    path = tmp_path / "s"
    _damaged(path)
    assert main(["stats", str(path)]) != 0
    err = capsys.readouterr().err
    assert str(path) in err and "cablestore-readonly" not in err
