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


STATE_FILES = ("trainer_state.json", "trainer_state.safetensors")  # train/state_file.py
OLD_STATE = "trainer_state.pt"  # the pickled trainer state of checkpoints written before format 2


def confined(root: Path, rel: object) -> Path | None:
    """`root/rel` when `rel` names a plain file path inside `root` (relative, no `..`, no symlink on the way
    out of `root`); None for anything else: an absolute path, `..`, a backslash or NUL, a link leaving the folder."""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\0" in rel or rel.startswith("/"):
        return None
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    root = Path(root)
    target, here = root / rel, root
    for part in parts:  # no component may be a symlink: a link is where a file would leave the folder
        here = here / part
        if here.is_symlink():
            return None
    try:
        if not target.resolve().is_relative_to(root.resolve()):
            return None
    except (OSError, RuntimeError):
        return None
    return target


def verify_checkpoint(path: Path) -> str:
    """Empty when `path` is a complete checkpoint (manifest present, every file listed there inside the folder
    with its size and hash, the trainer state among them); else one sentence saying what is wrong."""
    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except FileNotFoundError:
        return f"no {MANIFEST} (an interrupted write, or a folder tracerl did not write)"
    except (OSError, ValueError, RecursionError) as exc:
        return f"{MANIFEST} is unreadable ({type(exc).__name__})"
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict):
        return f"{MANIFEST} lists no files"
    for rel in files:
        if confined(path, rel) is None:
            return f"{MANIFEST} names {str(rel)[:80]!r}, a path outside the checkpoint folder (refused)"
    if OLD_STATE in files or (path / OLD_STATE).exists():
        return (f"it holds {OLD_STATE}, the pickled trainer state of an older tracerl, which is never loaded because "
                "unpickling can run code; start the run again with this tracerl version")
    missing = [f for f in STATE_FILES if f not in files]
    if missing:
        return f"{MANIFEST} does not list {missing[0]}"
    for rel, want in files.items():
        file = path / rel
        try:
            size = file.stat().st_size
        except OSError:
            return f"{rel} is missing"
        if not file.is_file():
            return f"{rel} is not a plain file"
        if not isinstance(want, dict) or size != want.get("bytes"):
            return f"{rel} has {size} bytes, the manifest says {want.get('bytes') if isinstance(want, dict) else '?'}"
        if file_sha256(file) != want.get("sha256"):
            return f"{rel} does not match its SHA-256 in the manifest (damaged)"
    return ""
