"""Isolated execution of untrusted code (docs/architecture.md, "The sandbox"). See `Sandbox` for what is and is not isolated.

    from tracerl.sandbox import Sandbox, Limits
    with Sandbox() as box:
        result = box.run("print(6 * 7)", limits=Limits(wall_s=2, cpu_s=1))
        assert result.status == "ok" and result.stdout == "42\\n"

`default_sandbox()` returns one process-wide warm sandbox that any thread may share.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import threading
from importlib import resources

from tracerl.sandbox import cgroups
from tracerl.sandbox.backend import LEVELS, find_python
from tracerl.sandbox.limits import ExecResult, Limits, Status
from tracerl.sandbox.sandbox import Sandbox, SandboxUnavailable

__all__ = ["REVISION", "ExecResult", "cgroups", "Limits", "Sandbox", "SandboxUnavailable", "Status", "default_sandbox",
           "isolation_report", "set_default_runtime", "LEVELS", "find_python"]

REVISION = "1+" + hashlib.sha256(
    b"".join(resources.files(__name__).joinpath(f).read_bytes() for f in ("_program.py", "_spare.py", "_zygote.py", "backend.py", "cgroups.py", "sandbox.py", "runtime.py"))
).hexdigest()[:12]
"""Recorded in run manifests: the sandbox's version plus a hash of the code that enforces it."""

_default: Sandbox | None = None
_default_lock = threading.Lock()
_runtime: tuple[str | None, tuple[str, ...]] = (None, ())


def set_default_runtime(python: str | None, preload: tuple[str, ...] = ()) -> None:
    """The interpreter (and preloaded modules) of the default sandbox; see sandbox.runtime.configure."""
    global _default, _runtime
    with _default_lock:
        if (python, tuple(preload)) != _runtime and _default is not None:
            _default.close()
            _default = None
        _runtime = (python, tuple(preload))


def _after_fork_in_child() -> None:
    global _default, _default_lock
    _default, _default_lock = None, threading.Lock()  # the parent's worker is not ours


os.register_at_fork(after_in_child=_after_fork_in_child)


def default_sandbox() -> Sandbox:
    """The shared warm sandbox of this process (created on first use, closed at exit; a forked
    child gets its own)."""
    global _default
    with _default_lock:
        if _default is None or _default._closed:
            _default = Sandbox(python=_runtime[0], preload=_runtime[1])
            atexit.register(_default.close)
        return _default


def isolation_report() -> dict:
    """What the sandbox enforces on this machine (level, enforced, missing); see `tracerl doctor`."""
    return default_sandbox().isolation_report()
