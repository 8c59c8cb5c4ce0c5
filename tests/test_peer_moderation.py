"""Moderation at the peer: message type 8 answered (and live), enforcement in every answer, sync of a moderated cabal.

Sans-I/O here; tests/test_transport_moderation.py runs the same over TCP with real processes.
"""

from __future__ import annotations

import pytest

from cablestore import Store, post_hash
from cablestore.peer import Node, Sync
from cablestore.wire import messages as M

from .moderation_helpers import ALEPH, BERT, CASHEW, EVE, MOD, URSULA, XU, act, cabal, role, text
from .peer_helpers import WALL, link, pump, responses

T0 = WALL - 3_600_000
RID = b"\x00\x00\x00\x07"
H = post_hash


@pytest.fixture
def moderated(tmp_path):
    with Store(tmp_path / "m", local_user=URSULA.public_key) as s:
        s.ingest_many(cabal(T0))
        yield s


def ask(conn, request) -> list:
    conn.receive_data(M.encode(request), WALL)
    return responses(conn.data_to_send())


def hashes_of(answers) -> list[bytes]:
    return [h for a in answers if isinstance(a, M.HashResponse) for h in a.hashes]


def test_moderation_state_request_is_answered_then_concluded(moderated):
    conn = Node(moderated).connect()
    out = ask(conn, M.ModerationStateRequest(RID, ("dev",), 0, 0))
    assert out[-1] == M.HashResponse(RID)  # future = 0: concluded
    assert hashes_of(out) == moderated.moderation_state(["dev"])
    assert len(hashes_of(out)) > 5 and not conn.state.requests


def test_oldest_and_channels_limit_the_answer_but_never_the_blocks(moderated):
    conn = Node(moderated).connect()
    late = hashes_of(ask(conn, M.ModerationStateRequest(RID, (), 0, T0 + 10**6)))
    assert late and all(moderated.post(h).type_name in ("post/block", "post/unblock") for h in late)


def test_a_live_moderation_state_request_pushes_new_moderation_posts_until_cancelled(moderated):
    conn = Node(moderated).connect()
    first = ask(conn, M.ModerationStateRequest(RID, ("dev",), 1, 0))
    assert first and first[-1] != M.HashResponse(RID)  # future = 1: stays open
    new = moderated.ingest(act(ALEPH, 0, T0 + 100, [XU.public_key], "dev")[0])
    moderated.ingest(text(BERT, T0 + 101, "dev", "chat is not moderation state")[0])
    assert hashes_of(responses(conn.data_to_send())) == [new]
    assert ask(conn, M.CancelRequest(b"c001", cancel_id=RID)) == []
    moderated.ingest(act(ALEPH, 1, T0 + 102, [XU.public_key], "dev")[0])
    assert conn.data_to_send() == b"" and not conn.state.requests


def test_local_only_posts_and_unnotified_blocks_never_leave(moderated):
    private = next(h for h in moderated.moderation_posts() if moderated.post(h).privacy == 1)
    silent = next(h for h in moderated.moderation_posts() if moderated.post(h).type_name == "post/block" and moderated.post(h).notify == 0)
    conn = Node(moderated).connect()
    assert private not in hashes_of(ask(conn, M.ModerationStateRequest(RID, ("dev",), 0, 0)))
    out = ask(conn, M.PostRequest(b"p001", (private, silent, moderated.moderation_posts()[0])))
    posts = [p for a in out if isinstance(a, M.PostResponse) for p in a.posts]
    assert [H(p) for p in posts] == [moderated.moderation_posts()[0]]


def test_dropped_posts_and_channels_are_not_answered(tmp_path):
    with Store(tmp_path / "s", local_user=URSULA.public_key) as s:
        s.ingest(role(URSULA, ALEPH, MOD, T0)[0])
        junk = [s.ingest(text(EVE, T0 + i, "junk", f"j{i}")[0]) for i in range(3)]
        keep = s.ingest(text(EVE, T0 + 5, "dev", "ok")[0])
        spam = s.ingest(text(EVE, T0 + 6, "dev", "spam")[0])
        s.ingest_many([act(ALEPH, 6, T0 + 10, channel="junk")[0], act(ALEPH, 4, T0 + 11, [spam], "dev")[0]])
        conn = Node(s).connect()
        assert ask(conn, M.ChannelListRequest(RID, 0, 0)) == [M.ChannelListResponse(RID, ("dev",))]
        assert hashes_of(ask(conn, M.TimeRangeRequest(b"t001", "junk", 0, 0, 0))) == []
        assert hashes_of(ask(conn, M.TimeRangeRequest(b"t002", "dev", 0, WALL + 10**9, 0))) == [keep]
        assert hashes_of(ask(conn, M.ChannelStateRequest(b"t003", "junk", 0))) == []
        out = ask(conn, M.PostRequest(b"t004", (*junk, spam, keep)))
        assert [H(p) for a in out if isinstance(a, M.PostResponse) for p in a.posts] == [keep]


def test_sync_between_two_stores_of_a_moderated_cabal_gives_equal_answers(moderated, tmp_path):
    """The copy, of the same local user, ends with the same moderation state and the same answers."""
    private = {h for h in moderated.moderation_posts() if moderated.post(h).privacy == 1}
    silent = {h for h in moderated.moderation_posts() if moderated.post(h).type_name == "post/block" and moderated.post(h).notify == 0}
    with Store(tmp_path / "copy", local_user=URSULA.public_key) as copy, Store(tmp_path / "expected", local_user=URSULA.public_key) as expected:
        # what the copy can get: everything but the posts that never leave a store
        expected.ingest_many([b for b in cabal(T0) if H(b) not in private | silent])
        a, b = link(Node(moderated), Node(copy))
        sync = Sync(b, "moderated")
        pump((a, b), polls=[sync])
        assert sync.done, sync.summary()
        assert sync.summary()["complete"], __import__("json").dumps(sync.summary(), default=str)
        assert private and silent and not (private | silent) & set(copy.moderation_posts())
        for channel in ("dev", None):
            assert copy.roles(channel) == expected.roles(channel) and copy.hidden_users(channel) == expected.hidden_users(channel)
        # Not sent, as §5.2.1.1 says: the role of a recipient who opted out, and an action for a channel
        # the copy did not ask for (a dropped channel is not listed, so not synced).
        missing = [expected.post(h) for h in set(expected.moderation_posts()) - set(copy.moderation_posts())]
        assert sorted((p.type_name, p.channel) for p in missing) == [("post/moderation", "junk"), ("post/role", "")]
        assert next(p for p in missing if p.type_name == "post/role").recipients == (CASHEW.public_key,)
        mine, theirs = copy.moderation_summary(), expected.moderation_summary()
        for key in ("roles", "hidden_users", "hidden_posts", "dropped_posts", "blocks", "unblocks", "blocked_by"):
            assert mine[key] == theirs[key], key
        assert copy.moderation_state(["dev"]) == expected.moderation_state(["dev"])
        assert copy.channel_time_range("dev") == expected.channel_time_range("dev") == moderated.channel_time_range("dev")
