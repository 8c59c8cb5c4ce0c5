"""Block and drop enforcement (cablestore.store.write.enforcing) on a real store: which posts the resolved state keeps out, and removing them."""

from __future__ import annotations

import plyvel
import pytest

from cablestore import JOIN, Store, decode_post, make_post, post_hash
from cablestore.errors import BlockedError, DroppedError
from cablestore.store.write import enforcing, indexer
from cablestore.store.write.batch import IndexState
from cablestore.store.write.txn import Txn
from cablestore.views import blocks
from cablestore.wire.codec import DROP_CHANNEL, DROP_POST

from .conftest import NOW
from .moderation_helpers import BERT, URSULA, XU, act, block, info, text

T0 = 1_700_000_000_000


def refusal(store: Store, buf: bytes, memo=None):
    return enforcing.refusal(store.db.get, post_hash(buf), decode_post(buf), memo)


def xu_posts():
    """XU's join, three texts and a post/info."""
    return [make_post(XU, JOIN, T0, channel="dev")[0], *(text(XU, T0 + i, "dev", f"said {i}")[0] for i in (1, 2, 3)),
            info(XU, T0 + 4, name="xu")[0]]


def open_store(path) -> Store:
    return Store(path, now=lambda: NOW, local_user=URSULA.public_key)


def test_no_moderation_row_means_no_memo_and_nothing_kept_out(tmp_path):
    with open_store(tmp_path / "s") as s:
        s.ingest_many(xu_posts())
        assert enforcing.memo_for(s.db) is None  # the check is then skipped altogether
        assert all(refusal(s, buf) is None for buf in xu_posts())
        s.ingest(block(URSULA, XU, T0 + 10, drop=1)[0])
        assert enforcing.memo_for(s.db) == {}


def test_a_dropping_block_keeps_out_every_post_of_its_recipient(tmp_path):
    with open_store(tmp_path / "s") as s:
        s.ingest(block(URSULA, XU, T0 + 10, drop=1)[0])
        memo = enforcing.memo_for(s.db)
        for buf in xu_posts():  # channel posts and post/info alike, before and after the block
            assert isinstance(refusal(s, buf), BlockedError)
            assert isinstance(refusal(s, buf, memo), BlockedError)
        assert refusal(s, text(BERT, T0 + 11, "dev", "fine")[0]) is None
        assert memo  # the block's row, read once for the transaction


def test_a_block_without_drop_keeps_out_only_channel_posts_from_its_time_on(tmp_path):
    with open_store(tmp_path / "s") as s:
        s.ingest(block(URSULA, XU, T0 + 10, drop=0)[0])
        assert refusal(s, text(XU, T0 + 9, "dev", "before")[0]) is None
        assert isinstance(refusal(s, text(XU, T0 + 10, "dev", "at")[0]), BlockedError)
        assert isinstance(refusal(s, text(XU, T0 + 11, "dev", "after")[0]), BlockedError)
        assert refusal(s, info(XU, T0 + 11, name="xu")[0]) is None  # not a channel post: only a dropping block keeps it out


def test_a_dropped_post_and_a_dropped_channel_keep_their_posts_out(tmp_path):
    spam, kept = text(XU, T0 + 1, "dev", "buy now")[0], text(XU, T0 + 2, "dev", "hello")[0]
    with open_store(tmp_path / "s") as s:
        s.ingest_many([spam, kept])
        s.ingest_many([act(URSULA, DROP_POST, T0 + 5, [post_hash(spam)], "dev")[0], act(URSULA, DROP_CHANNEL, T0 + 6, channel="junk")[0]])
        assert isinstance(refusal(s, spam), DroppedError) and refusal(s, kept) is None
        assert isinstance(refusal(s, text(BERT, T0 + 7, "junk", "x")[0]), DroppedError)
        assert s.get(post_hash(spam)) is None and s.get(post_hash(kept)) is not None


def test_candidates_of_a_block_row_are_every_stored_post_of_its_recipient(tmp_path):
    bert = text(BERT, T0 + 1, "dev", "not them")[0]
    with open_store(tmp_path / "s") as s:
        s.ingest_many([*xu_posts(), bert])
        s.ingest(block(URSULA, XU, T0 + 10, drop=0)[0])  # keeps nothing out yet: every post is older
        assert all(s.get(post_hash(b)) is not None for b in xu_posts())
        state = IndexState(Txn(s.db))
        changed = {k for k, _ in s.items(blocks.PREFIX)}
        assert changed
        # Every post of the recipient, of any type (a block's row may drop them all); refusal then decides; none of BERT's.
        assert enforcing.candidates(state, changed) == {post_hash(b) for b in xu_posts()}
        assert all(refusal(s, b) is None for b in xu_posts())


@pytest.mark.parametrize("drop, removed", [(1, 5), (0, 0)])
def test_the_indexer_removes_what_a_new_block_keeps_out_and_counts_it(tmp_path, drop, removed):
    with open_store(tmp_path / "s") as s:
        s.ingest_many(xu_posts())
    db = plyvel.DB(str(tmp_path / "s"))
    try:
        state = IndexState(Txn(db))
        buf = block(URSULA, XU, T0 + 10, drop=drop)[0]
        assert indexer.apply(state, buf, post_hash(buf), decode_post(buf)) is True
        indexer.commit(state, URSULA.public_key)
    finally:
        db.close()
    assert len(state.enforced) == removed and all(isinstance(why, BlockedError) for why in state.enforced.values())
    with open_store(tmp_path / "s") as s:
        gone = [b for b in xu_posts() if s.get(post_hash(b)) is None]
        assert len(gone) == removed and set(state.enforced) == {post_hash(b) for b in gone}
        assert s.check().consistent
