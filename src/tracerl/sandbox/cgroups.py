"""An optional ceiling on the total memory and processes of one warm worker's calls (cgroup v1).

RLIMIT_AS bounds one process, so a call that forks can hold about `nproc × memory_bytes`, and a
tmpfs's pages count against no rlimit at all. Where the host runs as root and the cgroup v1
`memory` and `pids` hierarchies are writable, each worker gets a group of its own: the kernel
then caps the sum of everything its calls hold (tmpfs included). Programs raise their own OOM
score to the maximum, so when the cap is reached the kernel kills the program that holds the
most memory, not the worker or a call's init. Elsewhere (cgroup v2, no write access) this is
reported as missing by `isolation_report()`, never pretended.
"""

from __future__ import annotations

import itertools
import os
import time

ROOT = "/sys/fs/cgroup"
_counter = itertools.count()


def _own_path(controller: str) -> str | None:
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if controller in controllers.split(","):
                    return os.path.join(ROOT, controller, path.lstrip("/"))
    except OSError:
        return None
    return None


def available() -> tuple[bool, str]:
    """Whether per-worker groups can be made here, and why not."""
    if os.geteuid() != 0:
        return False, "total memory per worker is not capped: cgroups need the host to run as root"
    for controller in ("memory", "pids"):
        base = _own_path(controller)
        if base is None or not os.path.isdir(base) or not os.access(base, os.W_OK):
            return False, f"total memory per worker is not capped: the cgroup v1 '{controller}' hierarchy is not writable"
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


def sweep_stale() -> None:
    """Remove empty groups left by tracerl processes that died without closing their sandbox."""
    for controller in ("memory", "pids"):
        base = _own_path(controller)
        try:
            names = os.listdir(base) if base else []
        except OSError:
            continue
        for name in names:
            parts = name.split("-")
            if name.startswith("tracerl-sandbox-") and len(parts) == 4 and parts[2].isdigit():
                if not os.path.exists(f"/proc/{parts[2]}"):
                    try:
                        os.rmdir(os.path.join(base, name))  # fails, harmlessly, if not empty
                    except OSError:
                        pass


class WorkerGroup:
    """A memory and a pids group for one worker; `procs_files` are what the worker joins."""

    def __init__(self, memory_bytes: int, max_pids: int, owner: int | None = None) -> None:
        """`owner` (the sandbox's host uid) gets the memory group's directory, so the worker can
        make one group per call below it; the group's own knobs stay root's."""
        global _swept
        if not _swept:
            _swept = True
            sweep_stale()
        name = f"tracerl-sandbox-{os.getpid()}-{next(_counter)}"
        self.dirs = []
        try:
            for controller, knob, value in (("memory", "memory.limit_in_bytes", memory_bytes),
                                            ("pids", "pids.max", max_pids)):
                path = os.path.join(_own_path(controller), name)
                os.mkdir(path)
                self.dirs.append(path)
                with open(os.path.join(path, knob), "w") as f:
                    f.write(str(value))
        except OSError:
            self.remove()
            raise
        self.procs_files = [os.path.join(d, "cgroup.procs") for d in self.dirs]
        self.memory_dir = self.dirs[0]
        if owner is not None:
            os.chown(self.memory_dir, owner, owner)

    def peak_memory_bytes(self) -> int:
        with open(os.path.join(self.dirs[0], "memory.max_usage_in_bytes")) as f:
            return int(f.read())

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer has killed in this group so far."""
        try:
            with open(os.path.join(self.dirs[0], "memory.oom_control")) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, IndexError, ValueError):
            pass
        return 0

    def remove(self, wait_s: float = 2.0) -> None:
        """Remove the groups once their processes are gone (rmdir fails while any remain), with
        any per-call groups a killed worker left below them."""
        deadline = time.monotonic() + wait_s
        for path in self.dirs:
            while True:
                try:
                    for sub in [e.path for e in os.scandir(path) if e.is_dir() and e.name.startswith("call-")]:
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
