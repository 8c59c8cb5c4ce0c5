"""The snapshot format: a Parquet dataset a Spark cluster, DuckDB or pandas can read.

A snapshot is a directory (a local path, ``file://``, ``hdfs://`` or
``s3a://`` URI) holding::

    manifest.json                                written last: format, partitions, counts,
                                                 the store's metadata, every file's sha256
    posts/part=0007/posts-0007-000.parquet       hash, blob: the stored posts whose hash
                                                 starts in partition 7's prefix range
    tombstones/tombstones-000.parquet            target, by, record: every tombstone
    live/live-003-000.parquet                    key, value: the store's derived entries,
                                                 one file series per key range (a view)
    decoded/part=0007/decoded-0007-000.parquet   with ``export --decoded``: the posts'
                                                 decoded fields (``rebuild/decoded.py``)
    moderation/roles.parquet (actions, blocks)   with ``export --decoded``: the moderation
                                                 state (``rebuild/moderation_tables.py``)

Partitions are ranges of the first hash byte (:func:`~cablestore.rebuild.recompute.partition_of`),
so a partition's posts are one LevelDB range and one task's input.  A
directory without ``manifest.json`` is not a snapshot (an export interrupted
before its end leaves none).  Every file is checked against the manifest's
sha256 before a row of it is used, by whichever engine reads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from cablestore.errors import RebuildError
from cablestore.store.lifecycle.opening import OLD_FORMATS as STORE_OLD_FORMATS

FORMAT = "cablestore-parquet-1"
MANIFEST = "manifest.json"
OLD_FORMATS = {"cablestore-snapshot-1": "msgpack segments"}
SCHEMAS = {
    "posts": pa.schema([("hash", pa.binary()), ("blob", pa.binary())]),
    "tombstones": pa.schema([("target", pa.binary()), ("by", pa.binary()), ("record", pa.binary())]),
    "live": pa.schema([("key", pa.binary()), ("value", pa.binary())]),
}
# What each table's file names look like (the manifest is checked against them before any path is opened).
_NAME = re.compile(
    r"^(?:(posts|decoded)/part=(\d{4})/(?:posts|decoded)-\2-\d{3}|(tombstones)/tombstones-\d{3}|(live)/live-\d{3}-\d{3}|(moderation)/(?:roles|actions|blocks))\.parquet$"
)


def file_name(table: str, part: int, seq: int) -> str:
    """The path, inside a snapshot, of file ``seq`` of ``table``'s partition (or key range) ``part``."""
    if table in ("posts", "decoded"):
        return f"{table}/part={part:04d}/{table}-{part:04d}-{seq:03d}.parquet"
    if table == "tombstones":
        return f"tombstones/tombstones-{seq:03d}.parquet"
    if table.startswith("moderation/"):  # one file each
        return f"{table}.parquet"
    return f"live/live-{part:03d}-{seq:03d}.parquet"


def table_of(name: str) -> str:
    """The table a file named in the manifest belongs to; RebuildError for a name no export writes."""
    m = _NAME.match(name)
    if not m:
        raise RebuildError(f"the manifest names {name!r}, which is no file of a snapshot")
    return next(g for g in (m.group(1), m.group(3), m.group(4), m.group(5)) if g)


# --- where a snapshot lives -------------------------------------------------------


def is_uri(location: str) -> bool:
    return re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", location) is not None


def spark_uri(location: str | os.PathLike) -> str:
    """The URI Spark reads a snapshot from: a local path becomes an absolute ``file://`` URI."""
    text = os.fspath(location)
    if is_uri(text):
        return text.rstrip("/")
    return "file://" + os.path.abspath(text)  # not percent-encoded: Hadoop's Path takes the characters as they are


def filesystem(location: str | os.PathLike) -> tuple[pafs.FileSystem, str]:
    """``(pyarrow filesystem, path in it)`` of a local path or a URI.

    ``s3a://`` (Hadoop's name, what Spark reads) is written through pyarrow's
    S3 filesystem as ``s3://``, with the credentials pyarrow finds in the
    environment; ``hdfs://`` needs libhdfs (``ARROW_LIBHDFS_DIR``).
    """
    text = os.fspath(location)
    if not is_uri(text):
        return pafs.LocalFileSystem(), os.path.abspath(text)
    scheme = text.split("://", 1)[0].lower()
    if scheme == "s3a":
        text = "s3" + text[3:]
    try:
        fs, path = pafs.FileSystem.from_uri(text)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise RebuildError(f"cannot open {location}: {_one_line(exc)}") from None
    return fs, path.rstrip("/")


def renames_directories(fs: pafs.FileSystem) -> bool:
    """True where moving a directory is one rename (local disks, HDFS); object stores copy."""
    return fs.type_name in ("local", "hdfs")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# --- the manifest -----------------------------------------------------------------


def parse_manifest(text: str | bytes, where: str) -> dict[str, Any]:
    """Check a manifest's shape; an old segment snapshot is refused with the command that replaces it."""
    try:
        manifest = json.loads(text)
    except ValueError:
        raise RebuildError(f"{where}/{MANIFEST} is not valid JSON (a damaged snapshot: export the store again)") from None
    fmt = manifest.get("format") if isinstance(manifest, dict) else None
    if fmt in OLD_FORMATS:
        raise RebuildError(
            f"{where} is a snapshot in the old {fmt} format ({OLD_FORMATS[fmt]}), which this version no longer reads; "
            f"export the store again: cablestore export STORE NEWDIR"
        )
    if fmt != FORMAT:
        raise RebuildError(f"{where}/{MANIFEST}: unknown snapshot format {fmt!r} (expected {FORMAT})")
    store_format = (manifest.get("store") or {}).get("meta", {}).get("format", "")
    if store_format.encode() in STORE_OLD_FORMATS:  # its derived rows are laid out as the current code never writes them
        raise RebuildError(
            f"{where} was exported from a store in format {store_format}; migrate the store (`cablestore migrate STORE`) and export it again"
        )
    parts, files = manifest.get("partitions"), manifest.get("files")
    if not isinstance(parts, int) or not 1 <= parts <= 256 or not isinstance(files, dict) or not isinstance(manifest.get("counts"), dict):
        raise RebuildError(f"{where}/{MANIFEST} is damaged (partitions, counts or files missing): export the store again")
    for name, info in files.items():
        table_of(name)
        if not (isinstance(info, dict) and isinstance(info.get("sha256"), str) and isinstance(info.get("bytes"), int) and isinstance(info.get("rows"), int)):
            raise RebuildError(f"{where}/{MANIFEST}: the entry of {name} is damaged: export the store again")
    return manifest


def load_manifest(location: str | os.PathLike) -> dict[str, Any]:
    """Read and check the manifest of the snapshot at ``location`` (through pyarrow's filesystems)."""
    fs, root = filesystem(location)
    try:
        with fs.open_input_stream(f"{root}/{MANIFEST}") as f:
            text = f.read()
    except FileNotFoundError:
        raise RebuildError(f"{location} is not a snapshot (no {MANIFEST}; an interrupted export leaves none)") from None
    except (pa.ArrowException, OSError) as exc:
        raise RebuildError(f"cannot read {location}/{MANIFEST}: {_one_line(exc)}") from None
    return parse_manifest(text, os.fspath(location))


def files_of(manifest: dict, table: str) -> list[tuple[str, dict]]:
    """``(name, info)`` of ``table``'s files, in name order (partition, then sequence)."""
    return sorted((n, i) for n, i in manifest["files"].items() if table_of(n) == table)


# --- reading one file -------------------------------------------------------------


def checked(data, name: str, info: dict) -> None:
    """Refuse a file whose bytes are not the ones the manifest describes."""
    if len(data) != info["bytes"] or hashlib.sha256(data).hexdigest() != info["sha256"]:
        raise RebuildError(f"{name}: sha256 checksum does not match the manifest (a damaged or changed snapshot: export the store again)")


def rows(data, name: str, info: dict, columns: list[str] | None = None, batch: int = 32768):
    """The rows of one checked file as tuples of ``columns`` (default: the table's), in file order.

    ``data``: the file's bytes (``bytes``, ``bytearray`` or a pyarrow Buffer).
    """
    checked(data, name, info)
    table = table_of(name)
    names = columns or SCHEMAS[table].names
    try:
        reader = pq.ParquetFile(pa.BufferReader(pa.py_buffer(data)))
        if reader.metadata.num_rows != info["rows"]:
            raise RebuildError(f"{name}: {reader.metadata.num_rows} rows, the manifest says {info['rows']}")
        for part in reader.iter_batches(batch_size=batch, columns=names):
            yield from zip(*(part.column(i).to_pylist() for i in range(len(names))), strict=True)
    except (pa.ArrowException, OSError) as exc:
        raise RebuildError(f"{name}: not a readable Parquet file of this snapshot: {_one_line(exc)}") from None


def pick(data, name: str, info: dict, wanted: set) -> dict:
    """``{hash: blob}`` of the posts of one checked posts file whose hash is in ``wanted`` (only those blobs are decoded)."""
    checked(data, name, info)
    try:
        table = pq.read_table(pa.BufferReader(pa.py_buffer(data)), columns=["hash"])
        hashes = table.column("hash").to_pylist()
        at = [i for i, h in enumerate(hashes) if h in wanted]
        if not at:
            return {}
        blobs = pq.read_table(pa.BufferReader(pa.py_buffer(data)), columns=["blob"]).column("blob").take(at).to_pylist()
    except (pa.ArrowException, OSError) as exc:
        raise RebuildError(f"{name}: not a readable Parquet file of this snapshot: {_one_line(exc)}") from None
    return {hashes[i]: blob for i, blob in zip(at, blobs, strict=True)}


def read_file(fs: pafs.FileSystem, root: str, name: str) -> bytes:
    """The bytes of one snapshot file (a snapshot's files are bounded in size by the export)."""
    try:
        with fs.open_input_stream(f"{root}/{name}") as f:
            return f.read()
    except FileNotFoundError:
        raise RebuildError(f"{name} is missing from the snapshot (export the store again)") from None
    except (pa.ArrowException, OSError) as exc:
        raise RebuildError(f"cannot read {name}: {_one_line(exc)}") from None
