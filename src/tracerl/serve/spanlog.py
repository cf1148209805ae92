"""The gateway's span log (`tracerl serve --spans FILE`): JSONL appended line by line, capped in size.

When writing a line would take the file past `max_bytes`, the file is renamed to `FILE.1` (replacing
an older `FILE.1`) and a new `FILE` is started, so the log holds at most about twice the cap on disk and
every line stays whole in one file. `max_bytes` None (or 0) keeps the old behaviour: one file that grows
without limit. A single line longer than the cap is written alone into a fresh file rather than dropped.
"""

from __future__ import annotations

import os
from pathlib import Path


class SpanLog:
    def __init__(self, path: str | Path, max_bytes: int | None = None) -> None:
        self.path, self.max_bytes = Path(path), max_bytes or None
        self.rotations = 0
        self._f = open(self.path, "a", encoding="utf-8")
        self._size = self._f.tell()

    def write(self, line: str) -> None:
        data = line.encode("utf-8")
        if self.max_bytes is not None and self._size > 0 and self._size + len(data) > self.max_bytes:
            self._rotate()
        self._f.write(line)
        self._size += len(data)

    def _rotate(self) -> None:
        self._f.close()
        os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        self._f = open(self.path, "a", encoding="utf-8")
        self._size, self.rotations = 0, self.rotations + 1

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self._f.close()
