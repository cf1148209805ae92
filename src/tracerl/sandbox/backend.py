"""How the warm worker is started on this machine: inside bubblewrap ("full") or, where bubblewrap
or user namespaces are missing, as a plain unprivileged process ("rlimits").

The command is built here and nowhere else, so `tracerl doctor` reports exactly what runs.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

LEVELS = ("rlimits", "full")
"""Isolation levels, weakest first. A recipe may require a minimum (`Sandbox(require="full")`)."""

NOBODY = 65534
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
PRELOAD = ("math", "cmath", "re", "json", "itertools", "collections", "functools", "fractions",
           "decimal", "random", "statistics", "string", "heapq", "bisect", "datetime", "typing",
           "operator", "copy", "io", "base64", "hashlib", "traceback", "linecache", "types",
           "resource", "atexit", "threading", "dataclasses", "enum", "tempfile", "shutil")
"""Modules the worker imports once, so a call does not pay for them (programs may import others)."""


@dataclass(frozen=True)
class Plan:
    """One way of starting the worker, with what it enforces and what it does not."""

    level: str
    argv: list[str]
    python: str
    run_as: int | None
    """Host uid the worker runs as (None: the current user)."""
    enforced: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    workbase: str | None = None


def world_readable(path: str) -> bool:
    """Whether an unprivileged user can execute `path` (every parent directory traversable)."""
    real = Path(os.path.realpath(path))
    try:
        if not real.stat().st_mode & stat.S_IXOTH:
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH for parent in real.parents)
    except OSError:
        return False


def find_python(explicit: str | None = None) -> str:
    """An interpreter the sandbox user can run: the given one, else this one, else the system's."""
    if explicit:
        return explicit
    candidates = [os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
                  "/usr/bin/python3", "/usr/local/bin/python3"]
    unprivileged = os.geteuid() == 0
    for cand in candidates:
        if os.path.exists(cand) and (not unprivileged or world_readable(cand)):
            return os.path.realpath(cand)
    return os.path.realpath(sys.executable)


def bwrap_path() -> str | None:
    return shutil.which("bwrap") or (os.path.exists("/usr/bin/bwrap") and "/usr/bin/bwrap") or None


def _system_binds(python: str) -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for etc in ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives"):
        if os.path.exists(etc):
            args += ["--ro-bind", etc, etc]
    prefix = os.path.dirname(os.path.dirname(python))
    if not prefix.startswith("/usr") and prefix not in ("/", ""):
        args += ["--ro-bind", prefix, prefix]  # an interpreter installed outside /usr (pyenv, conda)
    return args


RUNTIME_MOUNT = "/runtime"
"""Where a configured runtime venv (`sandbox.python`) appears inside the sandbox."""
THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
"""Set to 1 for the worker and every program: a numpy imported before fork must not own threads."""


def venv_root(python: str) -> str | None:
    """The venv directory holding `python` (a `pyvenv.cfg` beside its bin/), else None."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(python)))
    return root if os.path.isfile(os.path.join(root, "pyvenv.cfg")) else None


def full_plan(python: str) -> Plan | None:
    bwrap = bwrap_path()
    if bwrap is None:
        return None
    venv, inside = venv_root(python), python
    binds = _system_binds(os.path.realpath(python) if venv else python)  # the base interpreter's files
    if venv:  # the venv, read-only at a fixed place (the per-call tmpfs on /tmp and /work would hide it)
        binds += ["--ro-bind", venv, RUNTIME_MOUNT]
        inside = os.path.join(RUNTIME_MOUNT, os.path.relpath(os.path.abspath(python), venv))
    threads = [a for name in THREAD_ENV for a in ("--setenv", name, "1")]
    argv = [bwrap, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-net", "--unshare-cgroup-try", "--die-with-parent", "--new-session",
            "--clearenv", "--setenv", "PATH", SANDBOX_PATH, "--setenv", "LANG", "C.UTF-8", *threads,
            *binds,
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/work",
            "--dir", "/sandbox", "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/",
            "--", inside, "-I", "-B", "-c"]
    enforced = [
        "bubblewrap: read-only view of /usr and the libraries only; no /home, /root, /work of the host",
        "per call: new user, mount, PID, IPC and UTS namespaces",
        "per call: an empty network namespace of its own (no interface up; pooled, never shared by two live calls)",
        "per call: fresh size-capped tmpfs on /work, /tmp and /dev/shm, gone when the call ends",
        "per call: the whole process tree killed by PID-namespace teardown at the wall-clock limit",
        "rlimits: CPU, address space, processes (per call), file size, open files, no core dumps",
        "all capabilities dropped, no_new_privs, no user namespaces below the call's own",
        "file descriptors 3+ closed, clean environment, a fresh session keyring (/proc/keys hidden)",
    ]
    run_as = NOBODY if os.geteuid() == 0 else None
    if run_as is not None:
        enforced.append(f"runs as host uid {NOBODY} (nobody), not root")
    return Plan("full", argv, python, run_as, enforced, [])


def rlimits_plan(python: str, why: str) -> Plan:
    run_as = NOBODY if os.geteuid() == 0 else None
    workbase = tempfile.mkdtemp(prefix="tracerl-sandbox-")
    if run_as is not None:
        os.chown(workbase, run_as, run_as)
    os.chmod(workbase, 0o700)
    enforced = ["rlimits: CPU, address space, processes, file size, open files, no core dumps",
                "wall-clock kill of the program's process group; a private working directory per call",
                "clean environment, file descriptors 3+ closed, no_new_privs"]
    if run_as is not None:
        enforced.append(f"runs as host uid {NOBODY} (nobody), not root")
    missing = [why, "no namespaces: the host's files, processes and network are visible",
               "a process that leaves its process group (setsid) can outlive the call"]
    argv = [python, "-I", "-B", "-c"]
    return Plan("rlimits", argv, python, run_as, enforced, missing, workbase)
