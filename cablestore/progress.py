"""A small progress display for long commands: on a terminal only, never with --quiet;
and :func:`plural`, how every message counts things ("1 post", "2 posts").

A stage draws its count (against a total, as a bar, when one is known) and
its rate since the stage began: ``check: [#####.....] 51200/102400 8,412/s``.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Redraws ``label: n/total rate/s`` on stderr at most ten times a second."""

    def __init__(self, quiet: bool = False, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = not quiet and getattr(self.stream, "isatty", lambda: False)()
        self.label, self.total, self.count, self._drawn = "", None, 0, 0.0
        self._started = time.monotonic()

    def stage(self, label: str, total: int | None = None) -> Progress:
        """End the current line and start a stage counting to ``total`` (None: a plain counter)."""
        self._finish_line()
        self.label, self.total, self.count = label, total, 0
        self._started = time.monotonic()
        self._draw(force=True)
        return self

    def advance(self, n: int = 1) -> None:
        """Count ``n`` more items done."""
        self.count += n
        self._draw()

    def done(self) -> None:
        """Draw the final count and end the line."""
        self._finish_line()

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self._drawn < 0.1):
            return
        self._drawn = now
        if self.total:
            width = 30
            filled = int(width * min(self.count, self.total) / self.total)
            bar = f"[{'#' * filled}{'.' * (width - filled)}] {self.count}/{self.total}"
        else:
            bar = f"{self.count}" if self.count else "..."
        elapsed = now - self._started
        rate = f" {self.count / elapsed:,.0f}/s" if self.count and elapsed > 0 else ""
        self.stream.write(f"\r\033[K{self.label}: {bar}{rate}")
        self.stream.flush()

    def _finish_line(self) -> None:
        if self.enabled and self.label:
            self._draw(force=True)
            self.stream.write("\n")
            self.stream.flush()
        self.label = ""


def plural(n: int, noun: str, nouns: str | None = None, spec: str = "") -> str:
    """``n`` and the noun it counts, singular for exactly one: ``plural(1, "member")`` is ``"1 member"``, ``plural(0, "member")`` ``"0 members"``.

    ``nouns``: the plural when it is not ``noun + "s"`` (``"view entries"``);
    ``spec``: how ``n`` is formatted (``","``: ``1,024 posts``).
    """
    return f"{n:{spec}} {noun if n == 1 else nouns or noun + 's'}"
