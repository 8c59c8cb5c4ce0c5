"""Cabal keys: the file, and the store that remembers which cabal it belongs to (docs/security.md)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cablestore import Store
from cablestore.authoring.keyfile import read_cabal_key, write_cabal_key
from cablestore.errors import CabalMismatchError, KeyFileError
from cablestore.keyspace.keys import CABAL_KEY
from cablestore.store.lifecycle.cabal import cabal_digest

from .conftest import NOW


def test_a_new_cabal_key_file_is_64_hex_characters_mode_0600_and_never_overwritten(tmp_path):
    path = tmp_path / "cabal.key"
    key = write_cabal_key(path)
    assert len(key) == 32 and path.read_text() == key.hex() + "\n"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert read_cabal_key(path) == key
    with pytest.raises(KeyFileError, match="refusing to overwrite"):
        write_cabal_key(path)
    assert read_cabal_key(path) == key
    assert write_cabal_key(tmp_path / "other") != key  # random


@pytest.mark.parametrize("text", ["", "zz" * 32, "ab" * 31, "ab" * 33, "ab" * 32 + " extra", "cablestore-keypair 1\n"])
def test_a_file_that_is_not_a_cabal_key_is_refused(tmp_path, text):
    path = tmp_path / "bad"
    path.write_text(text)
    path.chmod(0o600)
    with pytest.raises(KeyFileError, match="not a cabal key file"):
        read_cabal_key(path)


def test_a_cabal_key_others_can_read_is_refused(tmp_path):
    path = tmp_path / "cabal.key"
    write_cabal_key(path)
    path.chmod(0o644)
    with pytest.raises(KeyFileError, match="accessible by others"):
        read_cabal_key(path)


def test_the_store_keeps_a_digest_and_refuses_another_cabal(tmp_path):
    key, other = os.urandom(32), os.urandom(32)
    with Store(tmp_path / "s", now=lambda: NOW) as s:
        s.join_cabal(key)
        s.join_cabal(key)  # the same cabal again: fine
        with pytest.raises(CabalMismatchError, match="another cabal"):
            s.join_cabal(other)
        assert s.db.get(CABAL_KEY) == cabal_digest(key) != key
        assert not any(key in k or key in v for k, v in s.db.iterator())  # the key itself is never stored
    with Store(tmp_path / "s", now=lambda: NOW) as s:  # remembered across opens
        with pytest.raises(CabalMismatchError):
            s.join_cabal(other)


def test_cabal_new_writes_the_key_and_never_prints_it(tmp_path):
    path = tmp_path / "cabal.key"
    done = subprocess.run([sys.executable, "-m", "cablestore", "cabal", "new", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    key = read_cabal_key(path)
    assert key.hex() not in done.stdout + done.stderr
    again = subprocess.run([sys.executable, "-m", "cablestore", "cabal", "new", str(path)], capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "refusing to overwrite" in again.stderr
    assert read_cabal_key(path) == key
