"""examples/archiver.py writes a peer's history to its JSONL oldest first, though a peer sends it newest first.

Real processes: a `cablestore serve` of a store with a history in two channels, the archiver following it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from cablestore import Store
from cablestore.authoring.author import Author

from .conftest import keypair, stop

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "cablestore"]
WAIT = 30.0
HISTORY = 120  # post/texts in each of two channels: more than one time-range page


def test_the_archivers_jsonl_holds_the_history_oldest_first(tmp_path):
    served, port_file, jsonl = tmp_path / "served.ldb", tmp_path / "port", tmp_path / "archive.jsonl"
    with Store(served) as store:
        author = Author(store, keypair("historian"))
        for i in range(HISTORY):
            author.text("general", f"general {i}")
            author.text("random", f"random {i}")
    serve = subprocess.Popen([*CLI, "serve", served, "--listen", "127.0.0.1:0", "--port-file", port_file, "--quiet"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    archiver = None
    try:
        deadline = time.monotonic() + WAIT
        while not port_file.exists() or not port_file.read_text().strip():
            assert serve.poll() is None and time.monotonic() < deadline, serve.stderr.read() if serve.poll() is not None else "no port"
            time.sleep(0.05)
        archiver = subprocess.Popen([sys.executable, ROOT / "examples" / "archiver.py", tmp_path / "archive.ldb",
                                     "--connect", f"127.0.0.1:{int(port_file.read_text())}", "--jsonl", jsonl],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        texts = []
        while len(texts) < 2 * HISTORY:
            assert archiver.poll() is None and time.monotonic() < deadline, archiver.stderr.read() if archiver.poll() is not None else texts
            time.sleep(0.1)
            lines = [json.loads(line) for line in jsonl.read_text().splitlines()] if jsonl.exists() else []
            texts = [d for d in lines if d["type"] == "post/text"]
    finally:
        if archiver is not None and archiver.poll() is None:
            assert stop(archiver) == 0, archiver.stderr.read()
        assert stop(serve) == 0, serve.stderr.read()
    for channel in ("general", "random"):
        written = [d["text"] for d in texts if d["channel"] == channel]
        assert written == [f"{channel} {i}" for i in range(HISTORY)], written[:5]  # oldest first, each once
    times = [d["timestamp"] for d in lines]
    assert times == sorted(times)
