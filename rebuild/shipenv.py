"""Pack the driver's Python environment so executors need nothing installed.

On a cluster the Spark job's Python workers import cablestore and its
compiled dependencies (plyvel, blake3, pynacl, msgpack, pyarrow).  Instead
of asking every node to install them, the driver packs what it runs with
into ``env.tar.gz``, laid out as a virtualenv (``bin/python``,
``pyvenv.cfg``, ``lib/pythonX.Y/site-packages``, as venv-pack makes it), and
the session ships it with ``spark.archives=env.tar.gz#env`` and
``PYSPARK_PYTHON=./env/bin/python``: each executor unpacks it in its working
directory.  The archive holds cablestore (from wherever it is imported, so
an editable checkout works too) and every installed distribution it depends
on, but pyspark and py4j, which Spark puts on the executors' path itself.

``bin/python`` links to the driver's base interpreter (the one a virtualenv
was made from), so the nodes need that Python, same version and path, and
nothing else.  The archive is cached (``$XDG_CACHE_HOME/cablestore/spark-env``)
under a key of the Python, the distributions' versions and cablestore's
source, and rebuilt only when one of them changes.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata as metadata
import io
import json
import os
import re
import sys
import sysconfig
import tarfile
import tempfile
from pathlib import Path

from cablestore.errors import RebuildError

ARCHIVE_NAME = "env"  # the directory each executor unpacks into: PYSPARK_PYTHON=./env/bin/python
EXECUTOR_PYTHON = f"./{ARCHIVE_NAME}/bin/python"
PROVIDED = {"pyspark", "py4j"}  # Spark adds its own to every Python worker's path
PACKAGES = ("cablestore", "cablestore.views", "cablestore.rebuild", "cablestore.recovery")  # the folders cablestore is made of
KEEP = 3  # cached archives kept
SOURCES = {".h", ".hpp", ".c", ".cc", ".cpp", ".pyx", ".pxd", ".pxi", ".pyc"}  # what no import needs


def cache_dir() -> Path:
    """Where packed environments are kept between runs."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cablestore" / "spark-env"


def _name(requirement: str) -> str | None:
    """The distribution a ``Requires-Dist`` line names, or None for an extra's requirement."""
    if re.search(r"""extra\s*==""", requirement.split(";", 1)[1] if ";" in requirement else ""):
        return None
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return m.group(1) if m else None


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dependencies(root: str = "cablestore") -> list[metadata.Distribution]:
    """The installed distributions ``root`` needs, transitively, but those Spark provides (and ``root`` itself)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [root]
    while todo:
        name = _canonical(todo.pop())
        if name in seen or name in PROVIDED:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            if name == _canonical(root):
                raise RebuildError(f"{root} is not installed, so its dependencies cannot be packed (pip install -e .)") from None
            continue  # a requirement whose marker excludes this platform, so not installed
        seen[name] = dist
        todo += [n for n in map(_name, dist.requires or []) if n]
    seen.pop(_canonical(root), None)
    return sorted(seen.values(), key=lambda d: _canonical(d.metadata["Name"]))


def _package_files() -> dict[str, Path]:
    """cablestore's own files, by their path inside site-packages (``cablestore/rebuild/spark_engine.py``)."""
    out: dict[str, Path] = {}
    for package in PACKAGES:
        folder = Path(importlib.import_module(package).__path__[0])
        prefix = package.replace(".", "/")
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                out.setdefault(f"{prefix}/{path.relative_to(folder).as_posix()}", path)
    return out


def _dist_files(dist: metadata.Distribution) -> dict[str, Path]:
    """A distribution's installed files inside its site-packages (scripts in bin/ and compiled caches left out)."""
    out = {}
    for f in dist.files or []:
        rel = f.as_posix()
        parts = rel.split("/")
        if rel.startswith("..") or "__pycache__" in parts or "tests" in parts[:-1] or os.path.splitext(rel)[1] in SOURCES:
            continue
        path = Path(dist.locate_file(f))
        if path.is_file():
            out[rel] = path
    return out


def _base_python() -> Path:
    return Path(os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable))


def _key(files: dict[str, Path], dists: list[metadata.Distribution]) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([sys.version, str(_base_python()), sysconfig.get_platform(), [(d.metadata["Name"], d.version) for d in dists]]).encode())
    for rel, path in sorted(files.items()):
        h.update(rel.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def pack(directory: str | os.PathLike | None = None) -> Path:
    """The packed environment's path, made (in ``directory``, default :func:`cache_dir`) unless cached."""
    dists = dependencies()
    own = _package_files()
    folder = Path(directory) if directory is not None else cache_dir()
    archive = folder / f"env-{_key(own, dists)}.tar.gz"
    if archive.is_file():
        os.utime(archive)  # most recently used: kept by the pruning below
        return archive
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".env-", suffix=".partial")
        try:
            with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w:gz", compresslevel=1) as tar:
                _write(tar, own, dists)
            os.replace(tmp, archive)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError as exc:
        raise RebuildError(f"cannot pack the Python environment for the executors into {folder}: {exc.strerror or exc}") from None
    _prune(folder, archive)
    return archive


def _write(tar: tarfile.TarFile, own: dict[str, Path], dists: list[metadata.Distribution]) -> None:
    base = _base_python()
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = f"lib/{version}/site-packages"
    for name in ("python", "python3", version):
        link = tarfile.TarInfo(f"bin/{name}")
        link.type, link.linkname, link.mode = tarfile.SYMTYPE, str(base), 0o777
        tar.addfile(link)
    cfg = f"home = {base.parent}\ninclude-system-site-packages = false\nversion = {'.'.join(map(str, sys.version_info[:3]))}\n".encode()
    info = tarfile.TarInfo("pyvenv.cfg")
    info.size, info.mode = len(cfg), 0o644
    tar.addfile(info, io.BytesIO(cfg))
    added = set()
    for files in [own, *(_dist_files(d) for d in dists)]:
        for rel, path in files.items():
            if rel not in added:
                added.add(rel)
                tar.add(path, arcname=f"{site}/{rel}", recursive=False)


def _prune(folder: Path, keep: Path) -> None:
    """Keep the most recently used archives."""
    old = sorted(folder.glob("env-*.tar.gz"), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in old[KEEP:]:
        if path != keep:
            try:
                path.unlink()
            except OSError:
                pass
