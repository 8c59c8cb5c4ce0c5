"""What every command module shares: argument types, the output flags, JSON
printing and opening a store that must already exist.  The command modules
import this one and never each other."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from cablestore.errors import StoreError


def print_json(data) -> None:
    """Print ``data`` as indented, key-sorted JSON (the ``--json`` output of every command)."""
    print(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False))


def open_existing(path: str):
    """Open the store at ``path`` without creating anything; refuse a path that holds none."""
    from cablestore.store.store import Store

    p = Path(path)
    if not p.exists():
        raise StoreError(f"{path} does not exist")
    if not p.is_dir():
        raise StoreError(f"{path} is a file, not a store directory")
    if not any(p.iterdir()):
        raise StoreError(f"{path} is an empty directory, not a store")
    if not (p / "CURRENT").is_file():
        raise StoreError(f"{path} is not a LevelDB store (no CURRENT file)")
    return Store(p, create=False)


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer of at least {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


positive_int = int_at_least(1)


def positive_float(text: str) -> float:
    """An argparse type: a finite number above 0 (seconds, say)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text}")
    return value


def partitions_int(text: str) -> int:
    """An argparse type: a partition count, 1 to 256 (one hash-prefix byte)."""
    value = positive_int(text)
    if value > 256:
        raise argparse.ArgumentTypeError(f"must be at most 256, got {value}")
    return value


def add_output_flags(p) -> None:
    """Add ``--quiet`` and ``--json`` to a subcommand's parser."""
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


