"""The sandbox runtime (`sandbox:` in a recipe): which interpreter sandboxed code runs under.

By default sandboxed code gets a bare system Python. Tool-integrated reasoning in the style of
ReTool and rStar2-Agent expects numpy and sympy, so a recipe may name a venv's interpreter:

    sandbox: {python: /opt/tracerl-runtime/bin/python, modules: [numpy, sympy]}

(`make sandbox-runtime` builds one from the system interpreter.) The venv is bound read-only at
/runtime inside the sandbox; the isolation is the same as without it (docs/sandbox.md, "Runtime").
`configure(cfg)` checks the interpreter and starts one sandboxed call that imports `modules`, and
refuses with one sentence (a `UserError`, exit 2) before any run directory exists: a missing
or non-executable path, an interpreter the sandbox user cannot read, a module it lacks, or an
isolation level below what the machine gives the system interpreter. The modules are then
imported once by the warm worker, so a call does not pay for them.
"""

from __future__ import annotations

import os
import subprocess

from pydantic import BaseModel, ConfigDict, Field

from tracerl.errors import UserError
from tracerl.sandbox.backend import NOBODY, venv_root, world_readable

MODULE_NAME = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"


class SandboxConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)  # not config.Cfg: config/ sits above sandbox/

    python: str | None = Field(None, min_length=1, max_length=4096)
    """Interpreter for sandboxed code (a venv's bin/python); None: the system's bare Python."""
    modules: list[str] = Field(default_factory=list, max_length=64)
    """Modules that must import inside the sandbox (checked at start, then preloaded), e.g. [numpy, sympy]."""


def _bad(python: str, why: str, fix: str) -> UserError:
    return UserError(f"sandbox.python {python!r} {why}; {fix}")


def check_interpreter(python: str, modules: list[str]) -> None:
    """Host-side checks of a runtime interpreter (no sandbox started)."""
    import re

    for m in modules:
        if not re.match(MODULE_NAME, m):
            raise UserError(f"sandbox.modules entry {m!r} is not a module name; write dotted names like numpy or numpy.linalg")
    if not os.path.isabs(python):
        raise _bad(python, "is not an absolute path", "give the full path of the interpreter, e.g. /opt/venv/bin/python")
    if not os.path.exists(python):
        raise _bad(python, "does not exist", "build a runtime with `make sandbox-runtime` or point it at a venv's bin/python")
    if os.path.isdir(python) or not os.access(python, os.X_OK):
        raise _bad(python, "is not an executable file", "point it at an interpreter, e.g. a venv's bin/python")
    real = os.path.realpath(python)
    if os.geteuid() == 0 and not world_readable(real):
        raise _bad(python, f"resolves to {real}, which the sandbox user (uid {NOBODY}) cannot read",
                   "make the venv from a system interpreter: /usr/bin/python3 -m venv DIR")
    if venv_root(python) is None and not real.startswith("/usr/"):
        top = real.split("/")[1] if real.count("/") > 1 else ""
        if top in ("tmp", "work", "sandbox", "dev", "proc"):
            raise _bad(python, f"lives under /{top}, which every call mounts over",
                       "use a venv (bound at /runtime) or an interpreter elsewhere")
    probe = "import sys; assert sys.version_info >= (3, 10), sys.version; print('tracerl-runtime-ok')"
    try:
        r = subprocess.run([python, "-I", "-c", probe], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise _bad(python, f"could not be run ({type(exc).__name__})", "point it at a working Python 3.10+") from None
    if r.returncode != 0 or r.stdout.strip() != "tracerl-runtime-ok":
        raise _bad(python, "is not a working Python 3.10 or newer", "point it at a venv's bin/python")


def configure(cfg: SandboxConfig | None) -> None:
    """Make `cfg` the runtime of this process's default sandbox, after checking it works."""
    from tracerl import sandbox as sb

    if cfg is None or (cfg.python is None and not cfg.modules):
        sb.set_default_runtime(None, ())
        return
    python = cfg.python or sb.find_python(None)
    if cfg.python is not None:
        check_interpreter(python, cfg.modules)
    with sb.Sandbox(python=python, preload=tuple(cfg.modules)) as box:
        imports = "".join(f"import {m}\n" for m in cfg.modules) or "pass\n"
        res = box.run(imports, limits=sb.Limits(wall_s=60, cpu_s=30, memory_bytes=2 << 30))
        level = box.level
    if res.status != "ok":
        last = (res.stderr.strip().splitlines() or [res.reason or res.status])[-1][:200]
        raise UserError(f"sandboxed code under {python} cannot import {', '.join(cfg.modules)} ({last}); "
                        f"install them into that environment ({python} -m pip install {' '.join(cfg.modules)})")
    base = sb.Sandbox().level
    if sb.LEVELS.index(level) < sb.LEVELS.index(base):
        raise _bad(python, f"runs at isolation level {level!r} where the system interpreter gets {base!r}",
                   "use a venv made from a system interpreter (run `tracerl doctor` for why)")
    sb.set_default_runtime(python, tuple(cfg.modules))
