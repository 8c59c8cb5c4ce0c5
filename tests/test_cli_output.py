"""What the commands print: show, stats, dump, channels, post --json, ingest's summary, progress, the demo, singular forms, names escaped."""

from __future__ import annotations

import io
import json
import unicodedata

import pytest

from cablestore import JOIN, TEXT, TOPIC, Store, make_post, post_hash
from cablestore.authoring.workload import generate, read_posts, write_posts
from cablestore.cli import main

from .cli_helpers import home, one_line, peer  # noqa: F401  (fixtures)
from .conftest import NOW, keypair, run_cli

# --- show / stats / dump ----------------------------------------------------


def test_show_prints_a_channel_oldest_first_with_names_and_deletions(peer, capsys):  # noqa: F811
    capsys.readouterr()
    assert main(["show", str(peer / "peer.ldb"), "General", "--limit", "0"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    with Store(peer / "peer.ldb") as s:
        msgs = s.messages("general")
        topic = s.topic("general")
    assert header.startswith(f"#General: topic {topic!r}, ") and f"{len(msgs)} messages (all {len(msgs)}" in header
    assert len(lines) == len(msgs)
    first, last = msgs[-1], msgs[0]  # messages() is newest first; show reads like a chat window
    assert lines[0].startswith(f"{first.time:%Y-%m-%d %H:%M:%S}  {first.who}") and lines[0].endswith(first.text or "post]")
    assert lines[-1].startswith(f"{last.time:%Y-%m-%d %H:%M:%S}")
    deletes = [m for m in msgs if m.text is None]
    assert deletes and sum("[deleted " in line for line in lines) == len(deletes)


def test_show_limit_and_json(peer, capsys):  # noqa: F811
    capsys.readouterr()
    assert main(["show", str(peer / "peer.ldb"), "general", "--limit", "3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["messages"]) == 3 and data["messages_total"] > 3
    times = [m["timestamp"] for m in data["messages"]]
    assert times == sorted(times)
    assert {"hash", "type", "author", "author_name", "time", "timestamp"} <= set(data["messages"][0])


def test_stats_text_and_json(peer, capsys):  # noqa: F811
    capsys.readouterr()
    assert main(["stats", str(peer / "peer.ldb"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    with Store(peer / "peer.ldb") as s:
        assert data["posts"] == len(s) and data["tombstones"] == sum(1 for _ in s.items(b"!deleted!")) > 0
    assert main(["stats", str(peer / "peer.ldb")]) == 0
    out = capsys.readouterr().out
    assert f"  posts:       {data['posts']:,}" in out and "    post/delete " in out and "  on disk:     " in out


def test_dump_writes_every_post_as_a_json_line_with_raw_hex(peer, capsys):  # noqa: F811
    capsys.readouterr()
    assert main(["dump", str(peer / "peer.ldb")]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    with Store(peer / "peer.ldb") as s:
        assert {r["hash"] for r in rows} == {k[6:].hex() for k, _ in s.items(b"!post!")}
    for r in rows:
        assert post_hash(bytes.fromhex(r["raw"])).hex() == r["hash"]
    assert main(["dump", str(peer / "peer.ldb"), "--channel", "GENERAL"]) == 0
    some = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert 0 < len(some) < len(rows)
    assert all(r.get("channel", "general").casefold() == "general" for r in some)
    assert any(r["type"] == "post/delete" for r in some)


def test_dump_limit_and_json(peer, capsys):  # noqa: F811
    _, lines, _ = run_cli(capsys, ["dump", peer / "peer.ldb"])
    rows = [json.loads(line) for line in lines.splitlines()]
    code, out, _ = run_cli(capsys, ["dump", peer / "peer.ldb", "--limit", "5"])
    assert code == 0 and [json.loads(line) for line in out.splitlines()] == rows[:5]
    code, out, _ = run_cli(capsys, ["dump", peer / "peer.ldb", "--json"])
    doc = json.loads(out)
    assert code == 0 and doc["posts"] == rows and doc["count"] == len(rows) and doc["channel"] is None and doc["limit"] is None
    code, out, _ = run_cli(capsys, ["dump", peer / "peer.ldb", "--json", "--limit", "99999999999999999999999", "--channel", "general"])
    doc = json.loads(out)
    assert code == 0 and doc["count"] == len(doc["posts"]) > 0 and doc["channel"] == "general"
    code, out, _ = run_cli(capsys, ["dump", peer / "peer.ldb", "--json", "--limit", "3"])
    assert json.loads(out)["posts"] == rows[:3]


# --- channels ----------------------------------------------------------------------------------


def test_channels_lists_every_channel(peer, capsys):  # noqa: F811
    code, out, err = run_cli(capsys, ["channels", peer / "peer.ldb"])
    with Store(peer / "peer.ldb") as s:
        summaries = s.channels()
    lines = out.splitlines()
    assert code == 0 and err == "" and len(lines) == len(summaries) >= 3
    for line, c in zip(lines, summaries, strict=True):
        assert line.startswith(f"#{c.spelling} ") and f" {c.messages:,} messages " in line and f" {c.members} members " in line
        assert line.endswith(f"topic {c.topic!r}" if c.topic else "(no topic)")
    code, out, _ = run_cli(capsys, ["channels", peer / "peer.ldb", "--json"])
    assert json.loads(out) == {"store": str(peer / "peer.ldb"), "channels": [c.to_dict() for c in summaries]}


def test_channels_of_a_store_without_any(tmp_path, capsys):
    Store(tmp_path / "s").close()
    code, out, _ = run_cli(capsys, ["channels", tmp_path / "s"])
    assert code == 0 and out == f"no channels in {tmp_path / 's'}\n"


# --- post --json speaks as dump does -------------------------------------------------------------


def test_post_json_spells_the_post_as_dump_does(tmp_path, capsys):
    key = tmp_path / "me.key"
    assert main(["keygen", str(key)]) == 0
    store = tmp_path / "s.ldb"
    assert main(["post", str(store), "--key", str(key), "name", "alice"]) == 0
    code, out, _ = run_cli(capsys, ["post", store, "--key", key, "--json", "text", "general", "hello"])
    posted = json.loads(out)
    assert code == 0 and "public_key" not in posted and posted["author_name"] == "alice" and posted["text"] == "hello"
    _, lines, _ = run_cli(capsys, ["dump", store, "--channel", "general"])
    dumped = {json.loads(line)["hash"]: json.loads(line) for line in lines.splitlines()}
    assert dumped[posted["hash"]] == posted


# --- ingest's summary and progress ----------------------------------------------------------------


def test_ingest_summary_separates_new_already_stored_and_refused_by_reason(tmp_path, capsys):
    bufs = generate(seed=6, posts=300)
    forged = bytearray(bufs[-1])
    forged[-1] ^= 1
    write_posts(tmp_path / "a.bin", bufs[:200])
    write_posts(tmp_path / "b.bin", bufs[150:] + [bytes(forged), b"\x00" * 120])
    store = str(tmp_path / "s.ldb")
    assert main(["ingest", store, str(tmp_path / "a.bin"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["ingest", store, str(tmp_path / "b.bin"), "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"read 152 posts from 1 file into {store}"
    assert lines[1] == "  new:            100"
    assert lines[2].startswith("  already stored: ") and int(lines[2].split()[-1]) <= 50
    refused = int(lines[3].split()[-1])
    assert lines[3].startswith("  refused:        ") and refused >= 2
    reasons = dict(line.strip().split(": ") for line in lines[4:])
    assert reasons["SignatureError"] == "1" and sum(map(int, reasons.values())) == refused
    assert "{" not in "\n".join(lines)
    assert main(["ingest", store, str(tmp_path / "b.bin"), "--quiet", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    # (a post whose deleting post/delete was itself deleted may come back as new: see docs/design.md on deletes)
    assert data["new"] + data["already_stored"] + sum(data["refused"].values()) == data["read"] == 152
    assert data["accepted"] == data["new"] + data["already_stored"] and data["refused"]["SignatureError"] == 1


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_export_progress_line_completes(peer, tmp_path, monkeypatch, capsys):  # noqa: F811
    tty = _Tty()
    monkeypatch.setattr("sys.stderr", tty)
    assert main(["export", str(peer / "peer.ldb"), str(tmp_path / "snap")]) == 0
    with Store(peer / "peer.ldb") as s:
        total = sum(1 for _ in s.items(b"!post!")) + sum(1 for _ in s.items(b"!deleted!"))
    last = tty.getvalue().split("\r\033[K")[-1]
    assert last.startswith(f"export posts and tombstones: [{'#' * 30}] {total}/{total} ") and last.endswith("/s\n")  # and the rate


# --- the demo -----------------------------------------------------------------------


def test_demo_explains_its_numbers_and_says_no_topic(tmp_path):
    from cablestore.demo import run_demo

    lines: list[str] = []
    report = run_demo(tmp_path / "demo.ldb", posts=2000, seed=1, engine="local", out=lines.append)
    text = "\n".join(lines)
    stored, deleted = report["stored"]["posts"], report["stored"]["deleted"]
    assert report["ok"] and stored + deleted == 2000 and deleted > 0
    assert report["rebuild"]["posts"] == stored  # the rebuild verifies what is stored, not what was sent
    assert f"{stored} posts are stored: the other {deleted} were deleted by post/deletes" in text
    assert f"checks those {stored} posts and the {report['stored']['tombstones']} tombstones" in text
    assert "(no topic)" in text and "topic ''" not in text
    assert any(v["topic"] == "" for v in report["channels"].values())


# --- plural forms ----------------------------------------------------------------------------------


def test_one_of_anything_is_singular(tmp_path, home, capsys):  # noqa: F811
    from cablestore.progress import plural

    assert [plural(n, "post") for n in (0, 1, 2)] == ["0 posts", "1 post", "2 posts"]
    assert plural(1, "view entry", "view entries") == "1 view entry" and plural(1024, "post", spec=",") == "1,024 posts"
    store = home / "one.ldb"
    code, out, _ = run_cli(capsys, ["show", store, "general", "--limit", "1"])
    assert code == 0 and ", 1 member, " in out.splitlines()[0]
    code, out, _ = run_cli(capsys, ["users", store])
    assert out.splitlines()[0] == f"1 user in {store}"
    code, out, _ = run_cli(capsys, ["generate", "--posts", "1", tmp_path / "one.bin"])
    assert out == f"wrote 1 post (seed 1) to {tmp_path / 'one.bin'}\n"
    code, out, _ = run_cli(capsys, ["ingest", tmp_path / "fresh.ldb", tmp_path / "one.bin", "--quiet"])
    assert out.splitlines()[0] == f"read 1 post from 1 file into {tmp_path / 'fresh.ldb'}"
    assert run_cli(capsys, ["post", tmp_path / "chat.ldb", "text", "general", "hi", "--key", home / "me.key"])[0] == 0
    code, out, _ = run_cli(capsys, ["channels", tmp_path / "chat.ldb"])
    assert out == "#general       1 message      1 member   (no topic)\n"  # the columns of "2 messages", "2 members"


# --- names that would break a line ----------------------------------------------------------------

NASTY = ["new\nline", "tab\there", "nul\x00byte", "bidi\u202eevil", "iso\u2067late", "line\u2028sep"]


@pytest.fixture(scope="module")
def nasty(tmp_path_factory):
    """A store whose channels (valid by the spec: UTF-8) have names that would break one line of output."""
    path = tmp_path_factory.mktemp("nasty") / "s.ldb"
    alice = keypair("alice")
    bufs = []
    for i, name in enumerate(NASTY):
        bufs.append(make_post(alice, JOIN, NOW - 100 + 3 * i, channel=name)[0])
        bufs.append(make_post(alice, TOPIC, NOW - 99 + 3 * i, channel=name, topic=f"topic of {name}")[0])
        bufs.append(make_post(alice, TEXT, NOW - 98 + 3 * i, channel=name, text=f"text in {name}\nsecond line")[0])
    with Store(path, now=lambda: NOW) as s:
        assert all(r.ok for r in s.ingest_many(bufs))
    return path


def _safe(text: str) -> bool:
    """One line per line, nothing a terminal would reorder or hide."""
    return all(c.isprintable() or c in "\n\u200c\u200d" for c in text)


def test_names_that_would_break_a_line_are_escaped_in_every_output(nasty, capsys):
    code, out, err = run_cli(capsys, ["channels", nasty])
    assert code == 0 and err == "" and _safe(out) and len(out.splitlines()) == len(NASTY)
    assert "#new\\nline " in out and "#bidi\\u202eevil " in out and "#nul\\x00byte " in out
    for name in NASTY:
        code, out, err = run_cli(capsys, ["show", nasty, name])
        assert code == 0 and _safe(out) and len(out.splitlines()) == 2, name
        assert out.splitlines()[1].endswith("text in " + repr(name)[1:-1] + "\\nsecond line")
        code, out, _ = run_cli(capsys, ["dump", nasty, "--channel", name])
        assert code == 0 and _safe(out) and len(out.splitlines()) == 3
        assert {json.loads(line)["channel"] for line in out.splitlines()} == {name}
        code, out, _ = run_cli(capsys, ["show", nasty, name, "--json"])
        assert code == 0 and _safe(out) and json.loads(out)["messages"][0]["channel"] == name
    code, out, _ = run_cli(capsys, ["channels", nasty, "--json"])
    assert _safe(out) and [c["name"] for c in json.loads(out)["channels"]] == sorted(NASTY)


def test_a_name_never_breaks_the_error_line(nasty, capsys):
    code, out, err = run_cli(capsys, ["show", nasty, "no\nsuch\u202e"])
    line = one_line(err)
    assert code == 2 and _safe(line) and "no channel 'no\\nsuch\\u202e'" in line and "bidi\\u202eevil" in line


def test_nfc_and_nfd_spellings_are_one_channel(tmp_path, capsys):
    nfc, nfd = unicodedata.normalize("NFC", "Ünïcode-café"), unicodedata.normalize("NFD", "ünïcode-CAFÉ")
    assert nfc != nfd and nfc.casefold() != nfd.casefold()
    alice, bob = keypair("alice"), keypair("bob")
    a = make_post(alice, TEXT, NOW - 10, channel=nfc, text="composed")[0]
    b = make_post(bob, TEXT, NOW - 5, channel=nfd, text="decomposed")[0]
    with Store(tmp_path / "s", now=lambda: NOW) as s:
        s.ingest_many([a, b])
        assert s.channel_list() == [unicodedata.normalize("NFC", "ünïcode-café")]
        assert s.channel_time_range(nfc) == s.channel_time_range(nfd) == [post_hash(b), post_hash(a)]
        assert s.check().consistent
    code, out, _ = run_cli(capsys, ["show", tmp_path / "s", nfd])
    assert code == 0 and out.splitlines()[1].endswith("composed") and out.splitlines()[2].endswith("decomposed")


def test_posts_file_of_nasty_names_round_trips(tmp_path):
    """A channel name is data: posts are refused for nothing the spec allows."""
    alice = keypair("alice")
    bufs = [make_post(alice, TEXT, NOW - i, channel=name, text="x")[0] for i, name in enumerate(NASTY)]
    write_posts(tmp_path / "p.bin", bufs)
    assert read_posts(tmp_path / "p.bin") == bufs
