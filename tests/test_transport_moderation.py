"""Moderation over TCP: a real `cablestore serve` of a moderated store, a wire client on 127.0.0.1, and `cablestore sync`."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from cablestore import Store, post_hash
from cablestore.wire import messages as M
from cablestore.wire.decoding import Decoder

from .conftest import stop
from .moderation_helpers import ALEPH, BERT, URSULA, cabal
from .peer_helpers import WALL

PY = sys.executable
T0 = WALL - 3_600_000
H = post_hash


@pytest.fixture
def served(tmp_path):
    """A moderated store served by a `cablestore serve` process: (port, facts read before serving)."""
    path = tmp_path / "served"
    with Store(path, local_user=URSULA.public_key) as s:
        s.ingest_many(cabal(T0))
        facts = {
            "state": s.moderation_state(["dev"]),
            "private": [h for h in s.moderation_posts() if s.post(h).privacy == 1],
            "silent": [h for h in s.moderation_posts() if s.post(h).type_name == "post/block" and s.post(h).notify == 0],
            "public": [h for h in s.moderation_posts() if s.shareable([h]) != [None]],
            "roles": s.roles("dev"),
            "hidden": [m.hash for m in s.messages("dev", include_hidden=True) if m.hidden_by is not None],
            "dev": s.channel_time_range("dev"),
            "channels": s.channel_list(),
        }
    proc = subprocess.Popen([PY, "-m", "cablestore", "serve", str(path), "--listen", "127.0.0.1:0", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = json.loads(proc.stdout.readline())
        yield first["port"], facts
    finally:
        assert stop(proc) == 0


def ask(port: int, *requests, wait: float = 5.0) -> list:
    """Send requests on one connection; collect answers until each concluded (or ``wait`` s passed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as sock:
        for r in requests:
            sock.sendall(M.encode(r))
        decoder, out, open_ids = Decoder(), [], {r.req_id for r in requests}
        deadline = time.monotonic() + wait
        while open_ids and time.monotonic() < deadline:
            data = sock.recv(65536)
            if not data:
                break
            for m in decoder.feed(data):
                out.append(m)
                if getattr(m, "concludes", False) or isinstance(m, M.ChannelListResponse):
                    open_ids.discard(m.req_id)
        assert not open_ids, f"unanswered: {open_ids}"
        return out


def hashes(answers, req_id) -> list[bytes]:
    return [h for a in answers if isinstance(a, M.HashResponse) and a.req_id == req_id for h in a.hashes]


def posts(answers, req_id) -> list[bytes]:
    return [p for a in answers if isinstance(a, M.PostResponse) and a.req_id == req_id for p in a.posts]


def test_a_wire_client_gets_the_moderation_state_and_nothing_local_only(served):
    port, facts = served
    out = ask(
        port,
        M.ModerationStateRequest(b"ms01", ("dev",), 0, 0),
        M.PostRequest(b"pr01", tuple(facts["private"] + facts["silent"] + facts["public"][:2])),
        M.ChannelListRequest(b"cl01", 0, 0),
        M.TimeRangeRequest(b"tr01", "junk", 0, WALL + 10**9, 0),
    )
    assert hashes(out, b"ms01") == facts["state"] and facts["state"]
    assert [H(p) for p in posts(out, b"pr01")] == facts["public"][:2]  # privacy=1 and notify=0 never leave
    listed = next(a.channels for a in out if isinstance(a, M.ChannelListResponse))
    assert list(listed) == facts["channels"] and "junk" not in listed  # a dropped channel is not listed
    assert hashes(out, b"tr01") == []


def test_hidden_posts_and_hidden_users_posts_are_still_answered_over_tcp(served):
    """Hide is a display rule (§5.1.3.4-5): stored, answered, requested like any post."""
    port, facts = served
    assert facts["hidden"]
    out = ask(port, M.TimeRangeRequest(b"tr02", "dev", 0, WALL + 10**9, 0), M.PostRequest(b"pr02", tuple(facts["hidden"])))
    assert hashes(out, b"tr02") == facts["dev"] and set(facts["hidden"]) <= set(facts["dev"])
    assert sorted(H(p) for p in posts(out, b"pr02")) == sorted(facts["hidden"])


def test_sync_of_a_moderated_cabal_over_tcp_resolves_the_same_roles(served, tmp_path):
    port, facts = served
    copy = tmp_path / "copy"
    done = subprocess.run(
        [PY, "-m", "cablestore", "sync", str(copy), "--connect", f"127.0.0.1:{port}", "--local-user", URSULA.public_key.hex(), "--json"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["complete"]
    with Store(copy) as s:
        assert s.local_user == URSULA.public_key
        held = set(s.moderation_posts())
        assert not held & set(facts["private"] + facts["silent"])
        assert set(facts["state"]) <= held
        # Bert is admin for the served store by Ursula's private role, which never left it; in the copy he
        # is what the public posts make him: Aleph's mod in dev.
        assert facts["roles"][BERT.public_key] == "admin" and s.roles("dev")[BERT.public_key] == "mod"
        assert s.roles("dev")[ALEPH.public_key] == "admin"
        assert s.moderation_state(["dev"]) == facts["state"]
