"""An optional ceiling on the total memory and processes of one warm worker's calls (cgroup v1 or v2).

RLIMIT_AS bounds one process, so a call that forks can hold about `nproc × memory_bytes`, and a
tmpfs's pages count against no rlimit at all. Where the host runs as root and the cgroup v1
`memory` and `pids` hierarchies are writable, or its cgroup v2 group delegates both controllers
to its children, each worker gets a group of its own: the kernel
then caps the sum of everything its calls hold (tmpfs included). Programs raise their own OOM
score to the maximum, so when the cap is reached the kernel kills the program that holds the
most memory, not the worker or a call's init. Elsewhere (no write access, no delegation) this
is reported as missing by `isolation_report()`, never pretended.
"""

from __future__ import annotations

import itertools
import os
import time

ROOT = "/sys/fs/cgroup"
_counter = itertools.count()


def _proc_cgroup() -> str:
    try:
        with open("/proc/self/cgroup") as f:
            return f.read()
    except OSError:
        return ""


def _own_path(controller: str) -> str | None:
    """This process's group in the cgroup v1 hierarchy holding `controller` (None if there is none)."""
    for line in _proc_cgroup().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return os.path.join(ROOT, controller, path.lstrip("/"))
    return None


def _v2_path() -> str | None:
    """This process's group in the unified (v2) hierarchy, where that hierarchy holds the memory and
    pids controllers and lets this group's children use them (cgroup.subtree_control)."""
    for line in _proc_cgroup().splitlines():
        hid, controllers, path = line.split(":", 2)
        if hid == "0" and controllers == "":
            base = os.path.join(ROOT, path.lstrip("/"))
            try:
                with open(os.path.join(base, "cgroup.subtree_control")) as f:
                    enabled = f.read().split()
            except OSError:
                return None
            return base if {"memory", "pids"} <= set(enabled) else None
    return None


def version() -> int | None:
    """1 or 2: the hierarchy worker groups are made in (v1 where its memory and pids controllers
    are mounted, else v2 where delegated); None when neither is usable."""
    if _own_path("memory") is not None and _own_path("pids") is not None:
        return 1
    return 2 if _v2_path() is not None else None


def available() -> tuple[bool, str]:
    """Whether per-worker groups can be made here, and why not."""
    if os.geteuid() != 0:
        return False, "total memory per worker is not capped: cgroups need the host to run as root"
    v = version()
    if v == 2:
        base = _v2_path()
        return (True, "") if os.access(base, os.W_OK) else (
            False, f"total memory per worker is not capped: the cgroup v2 group {base} is not writable")
    for controller in ("memory", "pids"):
        base = _own_path(controller)
        if base is None or not os.path.isdir(base) or not os.access(base, os.W_OK):
            return False, (f"total memory per worker is not capped: the cgroup v1 '{controller}' hierarchy is not "
                           "writable, and no cgroup v2 group here delegates memory and pids to its children "
                           "(its cgroup.subtree_control lacks them; run under systemd-run --scope -p Delegate=yes)")
    return True, ""


def oom_floor_pinned() -> tuple[bool, str]:
    """Whether a program's OOM score is pinned at the maximum. The kernel lets an unprivileged
    process lower its `oom_score_adj` down to the floor set by the last *privileged* write
    (CAP_SYS_RESOURCE); the worker's root launcher writes 1000, so where the host holds that
    capability a program cannot lower its score. A container's root often lacks it."""
    if os.geteuid() != 0:
        return False, "OOM score not pinned: the host is not root, so programs may lower their score"
    try:
        with open("/proc/self/status") as f:
            caps = next(int(line.split()[1], 16) for line in f if line.startswith("CapEff:"))
    except (OSError, StopIteration, ValueError):
        return False, "OOM score not pinned: the host's capabilities could not be read"
    if not caps >> 24 & 1:  # CAP_SYS_RESOURCE
        return False, ("OOM score not pinned: the host's root lacks CAP_SYS_RESOURCE (a container default), "
                       "so programs may lower their score; their memory group still confines the OOM killer to their call")
    return True, ""


_swept = False


def _group_bases() -> list[str]:
    """The folders worker groups are made in: the v2 group, or the v1 memory and pids groups of this process."""
    v = version()
    return [b for b in ([_v2_path()] if v == 2 else [_own_path(c) for c in ("memory", "pids")] if v == 1 else []) if b]


def _stale_owner(name: str) -> int | None:
    """The pid in a group name `tracerl-sandbox-PID-N` when that process is gone (None: not tracerl's, or alive)."""
    parts = name.split("-")
    if not (name.startswith("tracerl-sandbox-") and len(parts) == 4 and parts[2].isdigit() and parts[3].isdigit()):
        return None
    pid = int(parts[2])
    return pid if pid != os.getpid() and not os.path.exists(f"/proc/{pid}") else None


def remove_tree(path: str) -> bool:
    """rmdir a group and every group below it, deepest first (a group with children, even empty `call-N`
    ones, cannot be removed; its knob files go with it). False when some group still holds a process."""
    ok = True
    for here, _dirs, _files in os.walk(path, topdown=False, followlinks=False):
        try:
            os.rmdir(here)
        except FileNotFoundError:
            pass
        except OSError:
            ok = False
    return ok


def sweep_stale(bases: list[str] | None = None) -> list[str]:
    """Remove the groups left by tracerl processes that died without closing their sandbox (named
    `tracerl-sandbox-PID-N` with PID gone), children first; groups of live processes and anything not
    tracerl's are left alone. Returns the paths removed. `bases`: where to look (default: this host's)."""
    removed = []
    for base in _group_bases() if bases is None else bases:
        try:
            names = sorted(os.listdir(base))
        except OSError:
            continue
        for name in names:
            path = os.path.join(base, name)
            if _stale_owner(name) is not None and os.path.isdir(path) and not os.path.islink(path):
                if remove_tree(path):
                    removed.append(path)
    return removed


ZYGOTE_LEAF = "zygote"  # v2: the worker's own leaf (a v2 group with children may hold no processes)
# Knobs by version: (memory limit, memory peak, the file whose `oom_kill` line counts OOM kills)
KNOBS = {1: ("memory.limit_in_bytes", "memory.max_usage_in_bytes", "memory.oom_control"),
         2: ("memory.max", "memory.peak", "memory.events")}
# v2 delegation: the files the group's owner needs to make and fill groups below it
DELEGATED = ("cgroup.procs", "cgroup.threads", "cgroup.subtree_control")


class WorkerGroup:
    """A memory and a pids group for one worker; `procs_files` are what the worker joins.

    v1: one group in each of the memory and pids hierarchies; the worker joins both and makes its
    per-call groups below the memory one. v2: one group with both controllers; since a v2 group
    whose children use controllers may hold no processes, the worker joins a leaf `zygote/` below
    it and the per-call groups are that leaf's siblings. The group is delegated to `owner` (its
    directory and DELEGATED files), so the worker may create groups and move its calls' programs
    into them; the group's own limits stay root's."""

    def __init__(self, memory_bytes: int, max_pids: int, owner: int | None = None) -> None:
        global _swept
        if not _swept:
            _swept = True
            sweep_stale()
        self.version = version() or 1
        name = f"tracerl-sandbox-{os.getpid()}-{next(_counter)}"
        self.dirs = []
        try:
            if self.version == 2:
                path = os.path.join(_v2_path(), name)
                os.mkdir(path)
                self.dirs.append(path)
                for knob, value in (("memory.max", memory_bytes), ("memory.swap.max", 0), ("pids.max", max_pids)):
                    if knob != "memory.swap.max" or os.path.exists(os.path.join(path, knob)):
                        _write(os.path.join(path, knob), value)
                _write(os.path.join(path, "cgroup.subtree_control"), "+memory +pids")
                leaf = os.path.join(path, ZYGOTE_LEAF)
                os.mkdir(leaf)
                self.procs_files = [os.path.join(leaf, "cgroup.procs")]
                delegated = [path, *(os.path.join(path, f) for f in DELEGATED), leaf, self.procs_files[0]]
            else:
                for controller, knob, value in (("memory", "memory.limit_in_bytes", memory_bytes),
                                                ("pids", "pids.max", max_pids)):
                    path = os.path.join(_own_path(controller), name)
                    os.mkdir(path)
                    self.dirs.append(path)
                    _write(os.path.join(path, knob), value)
                self.procs_files = [os.path.join(d, "cgroup.procs") for d in self.dirs]
                delegated = [self.dirs[0]]
            if owner is not None:
                for target in delegated:
                    os.chown(target, owner, owner)
        except OSError:
            self.remove()
            raise
        self.memory_dir = self.dirs[0]

    def _knob(self, which: int) -> str:
        return os.path.join(self.dirs[0], KNOBS[self.version][which])

    def peak_memory_bytes(self) -> int:
        with open(self._knob(1)) as f:
            return int(f.read())

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer has killed in this group so far (read
        twice per call: the knob stays open, and pread needs no lock between threads)."""
        try:
            if getattr(self, "_events_fd", None) is None:
                self._events_fd = os.open(self._knob(2), os.O_RDONLY | os.O_CLOEXEC)
            for line in os.pread(self._events_fd, 4096, 0).decode().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, IndexError, ValueError):
            pass
        return 0

    def remove(self, wait_s: float = 2.0) -> None:
        """Remove the groups once their processes are gone (rmdir fails while any remain), with
        any per-call groups (and, v2, the worker's leaf) a killed worker left below them."""
        fd, self._events_fd = getattr(self, "_events_fd", None), None
        if fd is not None:
            os.close(fd)
        deadline = time.monotonic() + wait_s
        for path in self.dirs:
            while True:
                try:
                    for sub in [e.path for e in os.scandir(path)
                                if e.is_dir() and (e.name.startswith("call-") or e.name == ZYGOTE_LEAF)]:
                        try:
                            os.rmdir(sub)
                        except OSError:
                            pass
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(0.02)
        self.dirs = []


def _write(path: str, value) -> None:
    with open(path, "w") as f:
        f.write(str(value))


# Runs as root in a fresh interpreter: raise the OOM score to the maximum (the whole worker is
# the OOM killer's first pick before anything of the host's; a program may lower its own score,
# but its own memory group confines the killer to its call), join the groups, drop to the
# sandbox user, exec bubblewrap.
JOIN_AND_DROP = (
    "import os, sys\n"
    "uid, files, argv = int(sys.argv[1]), [f for f in sys.argv[2].split(':') if f], sys.argv[3:]\n"
    "with open('/proc/self/oom_score_adj', 'w') as f:\n"
    "    f.write('1000')\n"
    "for path in files:\n"
    "    with open(path, 'w') as f:\n"
    "        f.write(str(os.getpid()))\n"
    "os.setgroups([])\n"
    "os.setgid(uid)\n"
    "os.setuid(uid)\n"
    "os.execv(argv[0], argv)\n"
)
