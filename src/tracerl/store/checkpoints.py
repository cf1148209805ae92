"""Telling a complete checkpoint from anything else, by its manifest (docs/architecture.md, "Configuration and runs").

`train/checkpoint.py` writes a checkpoint's files, then its `MANIFEST.json` listing every file
with its size and SHA-256, last; `verify_checkpoint` reads the manifest back and checks every file.
It lives with the run directory, which picks the newest complete checkpoint to resume from.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

MANIFEST = "MANIFEST.json"


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_checkpoint(path: Path) -> str:
    """Empty when `path` is a complete checkpoint (manifest present, every file listed there with
    its size and hash, the trainer state among them); else one sentence saying what is wrong."""
    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except FileNotFoundError:
        return f"no {MANIFEST} (an interrupted write, or a folder tracerl did not write)"
    except (OSError, ValueError) as exc:
        return f"{MANIFEST} is unreadable ({exc})"
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or "trainer_state.pt" not in files:
        return f"{MANIFEST} does not list trainer_state.pt"
    for rel, want in files.items():
        file = path / rel
        try:
            size = file.stat().st_size
        except OSError:
            return f"{rel} is missing"
        if not isinstance(want, dict) or size != want.get("bytes"):
            return f"{rel} has {size} bytes, the manifest says {want.get('bytes') if isinstance(want, dict) else '?'}"
        if file_sha256(file) != want.get("sha256"):
            return f"{rel} does not match its SHA-256 in the manifest (damaged)"
    return ""
