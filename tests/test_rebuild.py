"""Rebuild: break a consistent store in each way, verify finds exactly that, repair fixes it.

Every damage runs on both engines; Spark tests share one local[2] session.
"""

from __future__ import annotations

import shutil

import pytest

from cablestore import TEXT, Store, post_hash
from cablestore.authoring.workload import generate
from cablestore.rebuild import check, export, rebuild
from cablestore.rebuild.recompute import view_of

from .conftest import NOW, dump, post

POSTS = b"!post!"
QUARANTINE = b"!quarantine!"
ENGINES = ["local", pytest.param("spark", marks=pytest.mark.spark)]
DERIVED = [b"!chat!", b"!state!", b"!author!", b"!user!", b"!channel!", b"!rev!"]


@pytest.fixture(scope="module")
def workload():
    return generate(seed=11, posts=400)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory, workload):
    """A consistent store built by ingest; each test gets a copy of its directory."""
    path = tmp_path_factory.mktemp("pristine") / "store"
    with Store(path, now=lambda: NOW) as s:
        s.ingest_many(workload)
        assert s.check().consistent
    return path


@pytest.fixture
def damaged(tmp_path, pristine):
    path = tmp_path / "store"
    shutil.copytree(pristine, path)
    with Store(path, now=lambda: NOW) as s:
        yield s


@pytest.fixture
def engine(request):
    return request.param


def _check(store, engine, request, fix=False):
    if engine == "spark":
        request.getfixturevalue("spark_session")
    return check(store, fix=fix, engine=engine, partitions=2 if engine == "spark" else 4)


def _latest_key(store, prefix, kind):
    """A ``!channel!`` key of the given kind (m: membership, t: topic)."""
    from cablestore.keyspace.keys import unescape

    return next(k for k, _ in store.items(prefix) if k[unescape(k, len(prefix))[1] :][:1] == kind)


def _first(store, prefix):
    return next(iter(store.items(prefix)))


def _assert_repairs_to(store, engine, request, expected_dump, quarantined=()):
    """Repair gives ``expected_dump``, plus the ``quarantined`` records set aside (never deleted)."""
    before = dict(dump(store))
    report = _check(store, engine, request, fix=True)
    assert report.consistent, report.to_dict()  # the verify that follows the repair
    assert report.repaired is not None and report.before["consistent"] is False
    after = dump(store)
    assert [kv for kv in after if not kv[0].startswith(QUARANTINE)] == expected_dump
    assert {k[len(QUARANTINE) :]: v for k, v in after if k.startswith(QUARANTINE)} == {k: before[k] for k in quarantined}


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_missing_entry_in_every_view(damaged, engine, request):
    original = dump(damaged)
    removed = [_first(damaged, prefix)[0] for prefix in DERIVED]
    removed += [_latest_key(damaged, b"!channel!", b"m"), _latest_key(damaged, b"!channel!", b"t")]
    removed += [next(k for k, _ in damaged.items(b"!user!") if k[6 + 32 : 6 + 33] == b"i")]
    for k in removed:
        damaged.db.delete(k)
    report = _check(damaged, engine, request)
    assert set(report.missing) == set(removed)
    assert not report.extra and not report.different and not report.faults
    assert {view_of(k) for k in report.missing} == {"chat", "state", "author", "user", "channel", "reverse"}
    _assert_repairs_to(damaged, engine, request, original)


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_extra_entries(damaged, engine, request):
    original = dump(damaged)
    extra = [b"!chat!" + b"nope\x00\x01" + bytes(40), b"!author!" + bytes(73), b"!zzz-unknown", b"!channel!x\x00\x01t"]
    for k in extra:
        damaged.db.put(k, b"junk")
    report = _check(damaged, engine, request)
    assert set(report.extra) == set(extra)
    assert not report.missing and not report.different and not report.faults
    _assert_repairs_to(damaged, engine, request, original)


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_changed_values(damaged, engine, request):
    original = dump(damaged)
    changed = []
    for prefix in (b"!channel!", b"!rev!", b"!user!"):
        k, v = _first(damaged, prefix)
        damaged.db.put(k, v + b"!")
        changed.append(k)
    report = _check(damaged, engine, request)
    assert set(report.different) == set(changed)
    assert not report.missing and not report.extra and not report.faults
    _assert_repairs_to(damaged, engine, request, original)


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_half_done_ingest_blob_without_views(tmp_path, workload, damaged, engine, request):
    """A blob written without its entries: repair indexes it as ingest would."""
    from cablestore import TEXT, decode_post

    extra_post = next(b for b in generate(seed=12, posts=50) if decode_post(b).post_type == TEXT)
    h = post_hash(extra_post)
    with Store(tmp_path / "reference", now=lambda: NOW) as ref:
        ref.ingest_many(workload)
        ref.ingest(extra_post)
        expected = dump(ref)
    damaged.db.put(POSTS + h, extra_post)
    report = _check(damaged, engine, request)
    assert report.missing and not report.extra and not report.faults
    assert any(k.endswith(h) for k in report.missing)
    _assert_repairs_to(damaged, engine, request, expected)


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_view_entries_whose_blob_is_gone(tmp_path, pristine, damaged, engine, request):
    key, _ = _first(damaged, POSTS)
    h = key[len(POSTS) :]
    reference = tmp_path / "reference"
    shutil.copytree(pristine, reference)
    with Store(reference, now=lambda: NOW) as ref:
        assert ref.delete(h)  # a clean local discard is what repair should reach
        expected = dump(ref)
    damaged.db.delete(key)
    report = _check(damaged, engine, request)
    assert report.extra and not report.faults
    assert any(k.startswith(b"!author!") and k.endswith(h) for k in report.extra)  # entries naming the missing post
    _assert_repairs_to(damaged, engine, request, expected)


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
@pytest.mark.parametrize("corruption", ["bad_hash", "undecodable", "bad_signature"])
def test_corrupted_blob(tmp_path, pristine, damaged, engine, corruption, request):
    key, blob = _first(damaged, POSTS)
    h = key[len(POSTS) :]
    if corruption == "bad_hash":
        bad, target = blob[:-1] + bytes([blob[-1] ^ 1]), h
    elif corruption == "undecodable":
        bad = blob + b"\x00"  # trailing byte, stored under its own (correct) hash
        target = post_hash(bad)
    else:
        bad = blob[:40] + bytes([blob[40] ^ 1]) + blob[41:]  # flip a signature bit
        target = post_hash(bad)
    reference = tmp_path / "reference"
    shutil.copytree(pristine, reference)
    with Store(reference, now=lambda: NOW) as ref:
        expected = dump(ref)
        if corruption == "bad_hash":
            ref.delete(h)
            expected = dump(ref)
    damaged.db.put(POSTS + target, bad)
    report = _check(damaged, engine, request)
    assert [(f.kind, f.hash) for f in report.faults] == [(corruption, target)]
    _assert_repairs_to(damaged, engine, request, expected, quarantined=[POSTS + target])


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_tombstoned_post_still_present(damaged, engine, request, workload):
    original = dump(damaged)
    deleted = next(b for b in workload if damaged.is_deleted(post_hash(b)))
    damaged.db.put(POSTS + post_hash(deleted), deleted)
    report = _check(damaged, engine, request)
    assert [(f.kind, f.hash) for f in report.faults] == [("tombstoned", post_hash(deleted))]
    assert not report.missing and not report.different
    _assert_repairs_to(damaged, engine, request, original)


@pytest.mark.spark
def test_engines_agree_on_the_fixture(tmp_path, spark_session):
    """Both engines give the same report on a store with several kinds of damage at once."""
    from cablestore.authoring.workload import read_posts

    bufs = read_posts("tests/data/cablejs-0.2.1-s7-2000/posts.bin")
    with Store(tmp_path / "s", now=lambda: NOW) as s:
        s.ingest_many(bufs)
        k, _ = _first(s, b"!state!")
        s.db.delete(k)
        s.db.put(b"!chat!zz\x00\x01" + bytes(40), b"")
        local = check(s, engine="local", partitions=8).to_dict()
        spark = check(s, engine="spark", partitions=8).to_dict()
    for report in (local, spark):
        report.pop("seconds")
        report.pop("engine")
    assert local == spark
    assert local["views"]["state"]["missing"] == 1 and local["views"]["chat"]["extra"] == 1


def test_snapshot_export_and_verify_from_snapshot(tmp_path, damaged):
    damaged.db.delete(_first(damaged, b"!author!")[0])
    manifest = export(damaged.db, tmp_path / "snap", partitions=4)
    assert manifest["counts"]["posts"] == sum(1 for _ in damaged.items(POSTS))
    assert sorted(n for n in manifest["files"] if n.startswith("posts/")) == [f"posts/part={k:04d}/posts-{k:04d}-000.parquet" for k in range(4)]
    from cablestore.rebuild import verify

    report = verify("local", snapshot=tmp_path / "snap")
    assert len(report.missing) == 1 and report.partitions == 4


def test_snapshot_checksum_mismatch_is_refused(tmp_path, damaged):
    from cablestore.errors import RebuildError
    from cablestore.rebuild import verify

    export(damaged.db, tmp_path / "snap", partitions=2)
    seg = tmp_path / "snap" / "posts" / "part=0001" / "posts-0001-000.parquet"
    seg.write_bytes(seg.read_bytes()[:-1])
    with pytest.raises(RebuildError, match="sha256 checksum does not match the manifest"):
        verify("local", snapshot=tmp_path / "snap")


def test_rebuild_requires_store_for_repair(tmp_path):
    from cablestore.errors import RebuildError

    with pytest.raises(RebuildError):
        rebuild(None, snapshot=tmp_path, repair=True)
    with pytest.raises(RebuildError):
        rebuild(None, engine="bogus", snapshot=tmp_path)


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_damaged_tombstone_is_a_fault_and_repair_removes_it(damaged, engine, request):
    original = dump(damaged)
    bad_key = b"!deleted!" + b"\x01" * 64
    damaged.db.put(bad_key, b"junk")
    report = _check(damaged, engine, request)
    assert [(f.kind, f.key) for f in report.faults] == [("bad_tombstone", bad_key)]
    _assert_repairs_to(damaged, engine, request, original, quarantined=[bad_key])


def test_damaged_tombstone_makes_ingest_say_repair(damaged, alice):
    from cablestore.errors import CorruptRecordError

    t = post(alice, TEXT, 5000, channel="general", text="x")
    damaged.db.put(b"!deleted!" + post_hash(t) + bytes(32), b"junk")
    with pytest.raises(CorruptRecordError, match=r"Store\.check\(fix=True\) sets it aside"):  # the CLI says `check --repair`
        damaged.ingest(t)


def test_stray_short_post_key_exports_and_is_a_fault(tmp_path, damaged):
    from cablestore.rebuild import verify

    damaged.db.put(b"!post!", b"junk")
    export(damaged.db, tmp_path / "snap", partitions=2)
    report = verify("local", snapshot=tmp_path / "snap")
    assert [(f.kind, f.key) for f in report.faults] == [("bad_hash", b"!post!")]


# --- tombstones are cross-checked, never trusted blindly ---------------------


def _tombstone_of(store, kind):
    """A stored (key, Tombstone) whose target is a stored-author text post's, and the text's bytes."""
    from cablestore.keyspace.records import Tombstone

    for key, value in store.items(b"!deleted!"):
        tomb = Tombstone.unpack(key[9:41], key[41:], value)
        if tomb.post_type == kind and store.get(tomb.by) is not None:
            return key, tomb
    raise AssertionError("no such tombstone")


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_a_tombstone_no_stored_delete_backs_quarantines_the_post_instead_of_deleting_it(damaged, engine, request):
    from cablestore.keyspace.records import Tombstone

    key, blob = _first(damaged, POSTS)
    h = key[len(POSTS) :]
    forged = Tombstone(h, b"\x07" * 32, blob[:32])  # "deleted by its author", by a delete nobody has
    damaged.db.put(b"!deleted!" + h + forged.by, forged.pack())
    report = _check(damaged, engine, request)
    assert [(f.kind, f.hash) for f in report.faults] == [("unverified_tombstone", h)]
    report = _check(damaged, engine, request, fix=True)
    assert damaged.db.get(QUARANTINE + key) == blob  # set aside, recoverable
    assert report.to_dict()["repaired"]["removed_records"] == 0


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_a_tombstone_its_stored_delete_contradicts_is_a_fault_and_the_post_stays(damaged, engine, request):
    from cablestore.keyspace.records import Tombstone

    original = dump(damaged)
    key, blob = _first(damaged, POSTS)
    h = key[len(POSTS) :]
    _, real = _tombstone_of(damaged, TEXT)  # a stored post/delete that never named h
    forged = Tombstone(h, real.by, blob[:32])
    bad_key = b"!deleted!" + h + real.by
    damaged.db.put(bad_key, forged.pack())
    report = _check(damaged, engine, request)
    assert [(f.kind, f.key) for f in report.faults] == [("bad_tombstone", bad_key)]
    assert not report.missing and not report.extra and not report.different  # the post is indexed as before
    _assert_repairs_to(damaged, engine, request, original, quarantined=[bad_key])


def test_a_tombstone_contradicting_the_stored_post_is_a_fault(damaged, request):
    from cablestore.keyspace.records import Tombstone

    original = dump(damaged)
    key, blob = _first(damaged, POSTS)
    h = key[len(POSTS) :]
    forged = Tombstone(h, b"\x08" * 32, b"\x09" * 32, b"\x09" * 32, TEXT, 1, ("general",))  # wrong author
    bad_key = b"!deleted!" + h + forged.by
    damaged.db.put(bad_key, forged.pack())
    report = _check(damaged, "local", request)
    assert [(f.kind, f.key) for f in report.faults] == [("bad_tombstone", bad_key)]
    _assert_repairs_to(damaged, "local", request, original, quarantined=[bad_key])


@pytest.mark.parametrize("field", ["channel_type", "channel_name", "deleter"])
def test_a_damaged_tombstone_that_still_decodes_is_a_fault_not_a_crash_or_a_wrong_view(damaged, request, field):
    import msgpack

    dump(damaged)
    key, tomb = _tombstone_of(damaged, TEXT)
    fields = msgpack.unpackb(damaged.db.get(key))
    if field == "channel_type":
        fields[4] = [7]
    elif field == "channel_name":
        fields[4] = ["elsewhere"]  # a wrong channel must not be "repaired" into the views
    else:
        fields[0] = b"\x05" * 32  # another deleter: the tag no longer matches
    damaged.db.put(key, msgpack.packb(fields))
    report = _check(damaged, "local", request)
    assert [(f.kind, f.key) for f in report.faults] == [("bad_tombstone", key)]
    assert not any(b"elsewhere" in k for k in report.missing)
    repaired = _check(damaged, "local", request, fix=True)
    assert repaired.consistent and damaged.db.get(QUARANTINE + key) is not None
    assert not any(b"elsewhere" in k for k, _ in damaged.items(b"!chat!"))


def test_signature_worker_finds_the_same_faults_as_checking_in_process(tmp_path, monkeypatch):
    """The local engine checks signatures in a worker process one batch ahead; the report must not change."""
    from rebuild import fold

    monkeypatch.setattr(fold, "VERIFY_BATCH", 600)  # several batches, each big enough for the pool
    path = tmp_path / "store"
    with Store(path, now=lambda: NOW) as s:
        s.ingest_many(generate(seed=5, posts=2000))
        keys = [k for k, _ in s.items(POSTS)]
        flipped = []
        for key in (keys[3], keys[len(keys) // 2], keys[-2]):  # first, middle and last batch
            blob = s.db.get(key)
            bad = blob[:40] + bytes([blob[40] ^ 1]) + blob[41:]
            s.db.delete(key)
            s.db.put(POSTS + post_hash(bad), bad)
            flipped.append(post_hash(bad))
        reports = [check(s, engine="local", partitions=4, verify_workers=n) for n in (0, 1)]
    in_process, worker = ([(f.kind, f.hash) for f in r.faults if f.kind == "bad_signature"] for r in reports)
    assert sorted(in_process) == sorted(("bad_signature", h) for h in flipped)
    assert worker == in_process
    untimed = [{k: v for k, v in r.to_dict().items() if k != "seconds"} for r in reports]
    assert untimed[0] == untimed[1]


def test_fold_digests_are_the_reference_bucket_digests(pristine):
    """Fold.add_entries inlines entry_digest, view_of and bucket for speed: it must equal them."""
    from rebuild.fold import Fold
    from rebuild.recompute import bucket, bucket_digest, view_of

    with Store(pristine, now=lambda: NOW) as s:
        pairs = [(k, v) for k, v in s.items() if not k.startswith(POSTS)]
    fold = Fold(8)
    fold.add_entries(pairs[: len(pairs) // 2])
    other = Fold(8)
    other.add_entries(pairs[len(pairs) // 2 :])
    fold.merge(other)
    groups: dict = {}
    for k, v in pairs:
        groups.setdefault((view_of(k), bucket(k, 8)), []).append((k, v))
    assert len(groups) > 8
    assert fold.hex_digests() == {b: f"{bucket_digest(e):064x}:{len(e)}" for b, e in groups.items()}
