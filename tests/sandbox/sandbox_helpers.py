"""Helpers shared by the sandbox tests (imported by name; tests/ has no packages)."""

import os
import time

from tracerl.sandbox import Limits

# Small limits keep the adversarial suite fast: one second of wall clock, 256 MB of address space.
SMALL = Limits(wall_s=1.0, cpu_s=1.0, memory_bytes=256 * 2**20, nproc=16, file_bytes=2**20,
               nofile=32, output_bytes=8192, disk_bytes=8 * 2**20)


def descendants(pid: int) -> set[int]:
    """Host pids below `pid` (read from /proc), to see whether anything outlived a call."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def settles(worker_pid: int, idle_count: int, timeout_s: float = 2.0) -> bool:
    """The worker's process tree shrinks back to its idle size (bwrap's init, the zygote and the
    armed init of the next call): nothing of the last call outlived it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(descendants(worker_pid)) <= idle_count:
            return True
        time.sleep(0.05)
    return False
