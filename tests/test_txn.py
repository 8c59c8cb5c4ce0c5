"""The write transaction (cablestore.store.write.txn.Txn) on a real LevelDB: reads see its own writes, scans overlay them, one batch at commit."""

from __future__ import annotations

import plyvel
import pytest

from cablestore.store.write.txn import Txn

H1, H2, H3 = (bytes([n]) * 32 for n in (1, 2, 3))


@pytest.fixture
def db(tmp_path):
    d = plyvel.DB(str(tmp_path / "db"), create_if_missing=True)
    d.put(b"a.1", b"one")
    d.put(b"a.2", b"two")
    d.put(b"b.1", b"other prefix")
    yield d
    d.close()


def _log_bytes(tmp_path) -> int:
    """Bytes in LevelDB's write-ahead log(s): every write that reaches the DB appends to it."""
    return sum(p.stat().st_size for p in (tmp_path / "db").glob("*.log"))


def test_reads_see_the_transactions_own_writes_before_the_db_does(db):
    txn = Txn(db)
    txn.put(b"a.3", b"three")
    txn.put(b"a.1", b"ONE")
    txn.delete(b"a.2")
    assert txn.get(b"a.3") == b"three" and txn.get(b"a.1") == b"ONE" and txn.get(b"a.2") is None
    assert txn.get(b"b.1") == b"other prefix"  # not written: the DB answers
    assert db.get(b"a.3") is None and db.get(b"a.1") == b"one" and db.get(b"a.2") == b"two"  # nothing written yet


def test_current_overlays_the_writes_on_the_db_and_scan_shows_the_db_alone(db):
    txn = Txn(db)
    txn.put_many([(b"a.0", b"zero"), (b"a.1", b"ONE")])
    txn.delete(b"a.2")
    txn.put(b"c.1", b"elsewhere")
    assert txn.current(b"a.") == [(b"a.0", b"zero"), (b"a.1", b"ONE")]
    assert txn.scan(b"a.") == [(b"a.1", b"one"), (b"a.2", b"two")]
    txn.put(b"a.9", b"nine")  # a write after a scan is seen by the next one
    assert txn.current(b"a.")[-1] == (b"a.9", b"nine")
    assert txn.current(b"z.") == []


def test_commit_writes_every_write_in_one_batch(db):
    txn = Txn(db)
    txn.put(b"a.3", b"three")
    txn.delete(b"a.1")
    txn.put(b"a.2", b"TWO")
    txn.commit()
    assert list(db.iterator()) == [(b"a.2", b"TWO"), (b"a.3", b"three"), (b"b.1", b"other prefix")]


def test_a_commit_with_no_writes_writes_nothing(db, tmp_path):
    before, log = list(db.iterator()), _log_bytes(tmp_path)
    txn = Txn(db)
    assert txn.get(b"a.1") == b"one" and txn.current(b"a.")  # reads alone
    txn.commit()  # an empty WriteBatch would still append a record to the log
    assert _log_bytes(tmp_path) == log and list(db.iterator()) == before
    txn = Txn(db)
    txn.put(b"a.1", b"one")  # the same value: still a write, so the log grows
    txn.commit()
    assert _log_bytes(tmp_path) > log


def test_last_candidate_is_the_greatest_db_key_under_a_prefix_not_skipped(db):
    for h in (H1, H2, H3):
        db.put(b"g.x" + h, b"")
    db.put(b"g.y" + H1, b"")  # the next prefix: never an answer for g.x
    txn = Txn(db)
    assert txn.last_candidate(b"g.x") == b"g.x" + H3
    assert txn.last_candidate(b"g.x", skip={H3}) == b"g.x" + H2
    assert txn.last_candidate(b"g.x", skip={H2, H3}) == b"g.x" + H1
    assert txn.last_candidate(b"g.x", skip={H1, H2, H3}) is None
    assert txn.last_candidate(b"g.w") is None
    txn.put(b"g.x" + b"\xff" * 32, b"")  # a candidate of the DB, not of the txn's writes
    assert txn.last_candidate(b"g.x") == b"g.x" + H3


def test_a_txn_reads_again_after_its_commit(db):
    txn = Txn(db)
    assert txn.scan(b"a.")  # opens the shared iterator
    txn.put(b"a.5", b"five")
    txn.commit()  # closes it: the next scan sees the committed DB
    assert (b"a.5", b"five") in txn.scan(b"a.")
