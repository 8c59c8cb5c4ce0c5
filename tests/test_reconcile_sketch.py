"""Sketches of set reconciliation (cablestore.wire.sketch and their use in cablestore.wire.reconcile): a difference
listed exactly, a sketch too small reported with an estimate, forged sketches and differences bounded or refused."""

from __future__ import annotations

import random

import pytest

from cablestore.errors import ReconcileError
from cablestore.wire import reconcile as R
from cablestore.wire.fields import encode_varint
from cablestore.wire.sketch import CELL_SIZE, MAX_CELLS, Sketch, cells_for, estimate, key_of

T0 = 1_700_000_000_000
SALT = bytes(range(8))


def _items(n: int, seed: int = 1) -> list[tuple[int, bytes]]:
    rng = random.Random(seed)
    return [(T0 + i * 2500 + rng.randrange(3), rng.randbytes(32)) for i in range(n)]


def _sketch(hashes, cells: int) -> Sketch:
    return Sketch(cells).add(key_of(SALT, h) for h in hashes)


def _exchange(a, b):
    """The whole exchange (the initiator holding ``a``), with every message's ranges kept to look at."""
    ini, other = R.Initiator(R.Items(a)), R.Items(b)
    answers, msg = [], ini.start()
    while msg is not None:
        answer = R.respond(other, msg)
        answers.append(R.decode(answer))
        msg = ini.receive(answer)
    return ini, answers


def test_a_sketch_difference_peels_to_exactly_the_hashes_each_side_alone_holds():
    rng = random.Random(2)
    shared = [rng.randbytes(32) for _ in range(2000)]
    mine, theirs = [rng.randbytes(32) for _ in range(25)], [rng.randbytes(32) for _ in range(15)]
    cells = cells_for(40)
    diff = _sketch(shared + mine, cells).subtract(_sketch(shared + theirs, cells))
    plus, minus, left = diff.peel()
    assert left == 0
    assert sorted(plus) == sorted(key_of(SALT, h) for h in mine)
    assert sorted(minus) == sorted(key_of(SALT, h) for h in theirs)


def test_a_sketch_round_trips_through_its_bytes():
    s = _sketch([bytes([i]) * 32 for i in range(50)], 30)
    assert len(s.encode()) == 30 * CELL_SIZE
    back = Sketch.decode(s.encode())
    assert (back.counts, back.keys, back.checks) == (s.counts, s.keys, s.checks)


@pytest.mark.parametrize("mine,theirs", [(300, 0), (150, 150), (2000, 1000)])
def test_a_sketch_too_small_lists_nothing_wrong_and_estimates_the_difference_from_its_counts(mine, theirs):
    """Counts are differences of two Poisson counts: their variance estimates the difference, one side or both,
    however full the cells (a 300-item difference in 27 cells: every cell full)."""
    rng = random.Random(4)
    only_mine, only_theirs = [rng.randbytes(32) for _ in range(mine)], [rng.randbytes(32) for _ in range(theirs)]
    cells = cells_for(10)
    diff = _sketch(only_mine, cells).subtract(_sketch(only_theirs, cells))
    guess = estimate(diff)
    plus, minus, left = diff.peel()
    assert left > 0
    assert set(plus) <= {key_of(SALT, h) for h in only_mine} and set(minus) <= {key_of(SALT, h) for h in only_theirs}
    assert (mine + theirs) / 2 < guess < (mine + theirs) * 2, guess
    assert cells_for(guess) > cells  # a larger sketch next


@pytest.mark.parametrize("one_sided", [True, False])
def test_dense_differences_are_found_exactly_in_tens_of_bytes_each(one_sided):
    a = _items(20_000)
    rng = random.Random(5)
    gone = rng.sample(range(len(a)), 600)
    side_a = {i for j, i in enumerate(gone) if one_sided or j % 2}
    side_b = set(gone) - side_a
    mine = [x for i, x in enumerate(a) if i not in side_a]
    theirs = [x for i, x in enumerate(a) if i not in side_b]
    ini, answers = _exchange(mine, theirs)
    assert ini.need == {a[i][1] for i in side_a} and ini.have == {a[i][1] for i in side_b}
    assert any(r.mode == R.DIFFERENCE for ranges in answers for r in ranges)
    assert ini.sent + ini.received < 600 * 100, (ini.sent, ini.received)


def test_differences_the_counts_hide_are_found_after_an_estimate():
    """Both sides lack as many items of one range: the counts say nothing differs there, the first sketch is too
    small, the answering side says how large the difference looks, and the next sketch lists it."""
    a = _items(3000, seed=6)
    only_a = set(range(100, 3000, 10))  # 290 items only the initiator holds ...
    only_b = set(range(101, 3000, 10))  # ... and 290 only the other side holds, side by side
    mine = [x for i, x in enumerate(a) if i not in only_b]
    theirs = [x for i, x in enumerate(a) if i not in only_a]
    ini, answers = _exchange(mine, theirs)
    assert ini.have == {a[i][1] for i in only_a} and ini.need == {a[i][1] for i in only_b}
    assert any(r.mode == R.ESTIMATE for ranges in answers for r in ranges)


def test_a_forged_sketch_ends_in_an_estimate_or_a_difference_of_the_answering_sides_own_items():
    rng = random.Random(7)
    items = _items(2000, seed=8)
    for cells in (3, 30, 300):
        forged = R.encode([R.Range(R.INFINITY, R.SKETCH, salt=rng.randbytes(8), sketch=rng.randbytes(cells * CELL_SIZE))])
        (answer,) = R.decode(R.respond(R.Items(items), forged))
        assert answer.mode in (R.ESTIMATE, R.DIFFERENCE, R.FINGERPRINT)
        assert set(answer.ids) <= {h for _, h in items}


def test_a_sketch_of_few_cells_over_many_items_is_split_not_read():
    """The answering side reads at most what a sketch's cells justify: a 3-cell sketch over 100,000 items is
    answered as any differing range (fingerprints), so a small message cannot cost a large read."""
    items = R.Items(_items(100_000, seed=9))
    forged = R.encode([R.Range(R.INFINITY, R.SKETCH, salt=SALT, sketch=bytes(3 * CELL_SIZE))])
    answer = R.decode(R.respond(items, forged))
    assert {r.mode for r in answer} == {R.FINGERPRINT} and len(answer) == R.BUCKETS


def test_sketches_count_in_the_answering_sides_budget_by_the_items_they_read():
    items = R.Items(_items(5000, seed=10))
    sketch = R.Range(R.INFINITY, R.SKETCH, salt=SALT, sketch=bytes(30 * CELL_SIZE))
    assert R.answer_ranges(items, [sketch])[1] == 1 + 5000 // R.ITEMS_PER_RANGE
    assert R.answer_ranges(items, [R.Range((T0 + 2500 * 100, b""), R.SKIP), sketch])[1] == 2 + 4900 // R.ITEMS_PER_RANGE
    assert R.answer_ranges(items, [R.Range(R.INFINITY, R.SKIP)])[1] == 1


def test_a_difference_naming_a_key_of_none_of_the_initiators_items_is_refused():
    ini = R.Initiator(R.Items(_items(100)))
    ini.start()
    lie = R.encode([R.Range(R.INFINITY, R.DIFFERENCE, salt=SALT, keys=(bytes(8),))])
    with pytest.raises(ReconcileError, match="names a key"):
        ini.receive(lie)


def test_a_difference_listing_ids_the_initiator_holds_needs_none_of_them():
    items = _items(100)
    ini = R.Initiator(R.Items(items))
    ini.start()
    stranger = bytes([9]) * 32
    claim = R.encode([R.Range(R.INFINITY, R.DIFFERENCE, salt=SALT, ids=(items[3][1], stranger), keys=(key_of(SALT, items[5][1]).to_bytes(8, "little"),))])
    assert ini.receive(claim) is None
    assert ini.need == {stranger} and ini.have == {items[5][1]}


@pytest.mark.parametrize(
    "message,words",
    [
        (encode_varint(0) + encode_varint(0) + encode_varint(R.SKETCH) + bytes(8) + encode_varint(4) + bytes(4 * CELL_SIZE), "multiple of 3"),
        (encode_varint(0) + encode_varint(0) + encode_varint(R.SKETCH) + bytes(8) + encode_varint(0), "multiple of 3"),
        (encode_varint(0) + encode_varint(0) + encode_varint(R.SKETCH) + bytes(8) + encode_varint(MAX_CELLS + 3), "at most"),
        (encode_varint(0) + encode_varint(0) + encode_varint(R.SKETCH) + bytes(8) + encode_varint(6) + bytes(5 * CELL_SIZE), "cut short"),
        (encode_varint(0) + encode_varint(0) + encode_varint(R.SKETCH) + bytes(3), "salt"),
        (encode_varint(0) + encode_varint(0) + encode_varint(R.ESTIMATE) + encode_varint(0), "estimate"),
        (encode_varint(0) + encode_varint(0) + encode_varint(R.DIFFERENCE) + bytes(8) + encode_varint(0) + encode_varint(R.MAX_IDS + 1), "key list"),
    ],
)
def test_malformed_sketch_messages_are_refused(message, words):
    with pytest.raises(ReconcileError, match=words):
        R.decode(bytes([R.VERSION]) + message)


@pytest.mark.parametrize("mode", [R.SKETCH, R.ESTIMATE, R.DIFFERENCE])
def test_a_range_mode_sent_the_wrong_way_is_refused(mode):
    fields = {R.SKETCH: {"salt": SALT, "sketch": bytes(3 * CELL_SIZE)}, R.ESTIMATE: {"estimate": 5}, R.DIFFERENCE: {"salt": SALT}}[mode]
    wrong = R.encode([R.Range(R.INFINITY, mode, **fields)])
    if mode == R.SKETCH:  # a sketch goes to the answering side: the initiator refuses one
        ini = R.Initiator(R.Items(_items(50)))
        ini.start()
        with pytest.raises(ReconcileError, match="sent to the initiator"):
            ini.receive(wrong)
    else:  # estimates and differences go to the initiator: the answering side refuses them
        with pytest.raises(ReconcileError, match="sent to the answering side"):
            R.respond(R.Items(_items(50)), wrong)
