"""Progress bars only on a terminal: a redirected log gets the plain per-step lines, never `\\r` frames.

`run.progress: true` asks for bars; they are drawn only when the stream they draw on (stderr, tqdm's
default) is an interactive terminal. Piped into a file, `tail -f`, CI or a job scheduler's log, the
same run writes one plain line per RL step (`rl step 3/10 | reward ...`) and SFT's summary lines.
"""

from __future__ import annotations

import sys
from typing import IO


def bars_on(wanted: bool, stream: IO | None = None) -> bool:
    """Whether to draw progress bars: asked for, and `stream` (default: stderr now) is a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(wanted) and bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
