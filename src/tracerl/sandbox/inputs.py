"""The caller's side of a call, checked once: code, stdin, files and limits become an immutable
payload before anything runs, or the call is refused (`blocked`) with one sentence saying why.

Everything is read exactly once into plain bytes and str, so a mapping that answers differently
on a second read, or a buffer changed by another thread, cannot slip past the checks: what runs
is what was checked. Anything the call's own setup could fail on (a name that is both a file and
a directory, a NUL, text that is not UTF-8, more files than the call's disk has inodes or pages)
is refused here instead of surfacing later as an infrastructure `crash`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping

from tracerl.sandbox.limits import Limits

PAGE = 4096
MAX_INODES = 4000  # the call's tmpfs has 4096 (nr_inodes); a few are the sandbox's own
MAX_NAME_BYTES = 255  # one path component (NAME_MAX)
MAX_PATH_BYTES = 1024
MAX_DEPTH = 32


def _text(what: str, value: str) -> bytes | str:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"{what} is not valid UTF-8 text ({exc.reason} at position {exc.start}); pass bytes or fix the text"


def _bytes(what: str, value) -> bytes | str:
    if isinstance(value, str):
        return _text(what, value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return f"{what} must be str or bytes, got {type(value).__name__}"


def _check_name(name) -> str:
    if not isinstance(name, str):
        return f"file name {name!r} must be a str, got {type(name).__name__}"
    if "\0" in name:
        return f"file name {name!r} holds a NUL character; remove it"
    encoded = _text(f"file name {name!r}", name)
    if isinstance(encoded, str):
        return encoded
    parts = name.split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return f"file path {name!r} must be relative, without '.', '..' or empty parts"
    if any(len(p.encode()) > MAX_NAME_BYTES for p in parts):
        return f"file path {name[:40]!r}... has a part longer than {MAX_NAME_BYTES} bytes; shorten it"
    if len(encoded) > MAX_PATH_BYTES or len(parts) > MAX_DEPTH:
        return f"file path {name[:40]!r}... is longer than {MAX_PATH_BYTES} bytes or {MAX_DEPTH} levels deep; shorten it"
    return ""


def _snapshot_files(files) -> list[tuple[str, bytes, bool]] | str:
    """(name, data, was text) for every file, read once."""
    if files is None:
        return []
    if not isinstance(files, Mapping):
        return f"files must be a mapping of relative path to str or bytes, got {type(files).__name__}"
    try:
        items = [(name, files[name]) for name in list(files)]
    except Exception as exc:  # noqa: BLE001 - a caller's mapping may raise anything
        return f"files could not be read ({type(exc).__name__}: {exc}); pass a plain dict"
    out = []
    for name, data in items:
        refused = _check_name(name)
        if refused:
            return refused
        raw = _bytes(f"file {name!r}", data)
        if isinstance(raw, str):
            return raw
        out.append((name, raw, isinstance(data, str)))
    return out


def _check_layout(entries, code_bytes: int, limits: Limits) -> str:
    names = [name for name, _, _ in entries]
    if len(set(names)) != len(names):
        return "files names the same path twice; pass each path once"
    dirs = {"/".join(name.split("/")[:i]) for name in names for i in range(1, name.count("/") + 1)}
    clash = sorted(dirs.intersection(names))
    if clash:
        return f"file path {clash[0]!r} is both a file and a directory of another file; rename one of them"
    if len(names) + len(dirs) > MAX_INODES:
        return (f"{len(names)} files in {len(dirs)} directories are more than the {MAX_INODES} "
                "a call's disk holds; pack them into fewer files")
    pages = sum(-(-len(data) // PAGE) * PAGE for _, data, _ in entries) + PAGE * len(dirs)
    if code_bytes + pages > limits.disk_bytes:
        return (f"code and files take {code_bytes + pages} bytes of disk (files count whole {PAGE}-byte pages), "
                f"more than Limits.disk_bytes={limits.disk_bytes}; raise it or send less")
    return ""


def check(code, stdin, files, limits) -> tuple[bytes, bytes] | str:
    """(payload, stdin bytes) ready to send, or the reason the call is refused."""
    if not isinstance(limits, Limits):
        return f"limits must be a tracerl.sandbox.Limits, got {type(limits).__name__}"
    if not isinstance(code, str):
        return f"code must be a str, got {type(code).__name__}"
    code_bytes = _text("code", code)
    if isinstance(code_bytes, str):
        return code_bytes
    stdin_bytes = _bytes("stdin", stdin)
    if isinstance(stdin_bytes, str):
        return stdin_bytes
    entries = _snapshot_files(files)
    if isinstance(entries, str):
        return entries
    refused = _check_layout(entries, len(code_bytes), limits)
    if refused:
        return refused
    encoded = {name: ("text", data.decode()) if text else ("b64", base64.b64encode(data).decode())
               for name, data, text in entries}
    payload = json.dumps({"code": code, "files": encoded, "limits": limits.to_dict()}).encode()
    return payload, stdin_bytes
