"""What one sandboxed call may use (`Limits`) and what came back (`ExecResult`)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from enum import Enum

from tracerl.errors import UserError


class Status(str, Enum):
    """How a sandboxed call ended. A `str` enum: `result.status == "ok"` works."""

    OK = "ok"
    """The program ran to the end and exited with code 0."""
    ERROR = "error"
    """The program exited non-zero, raised, or was killed by a signal (exit_code < 0)."""
    TIMEOUT = "timeout"
    """The wall-clock or CPU limit was reached; the whole process tree was killed."""
    MEMORY = "memory"
    """The program ran out of its address-space limit (an uncaught MemoryError)."""
    OUTPUT_LIMIT = "output_limit"
    """stdout or stderr exceeded `Limits.output_bytes`; the process tree was killed."""
    BLOCKED = "blocked"
    """The sandbox refused the call before running it (bad file path, inputs too large)."""
    CRASH = "crash"
    """The sandbox itself failed (worker died, setup failed): an infrastructure fault, never the
    program's outcome. Callers should retry or exclude, never reward or penalise."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Limits:
    """Resource limits for one call. Every field is enforced by the kernel, not by the program."""

    cpu_s: float = 10.0
    """CPU seconds (RLIMIT_CPU, rounded up to whole seconds); reaching it is a `timeout`."""
    wall_s: float = 20.0
    """Wall-clock seconds from start to kill of the whole process tree; reaching it is a `timeout`."""
    memory_bytes: int = 512 * 2**20
    """Address space per process (RLIMIT_AS); includes the interpreter's own ~30 MB."""
    nproc: int = 32
    """Processes and threads the call may have at once (RLIMIT_NPROC in the call's own user
    namespace, so concurrent calls do not share the budget)."""
    file_bytes: int = 16 * 2**20
    """Largest file the program may write (RLIMIT_FSIZE)."""
    nofile: int = 64
    """Open file descriptors (RLIMIT_NOFILE)."""
    output_bytes: int = 64 * 2**10
    """Bytes of stdout and, separately, of stderr kept; more kills the call (`output_limit`)."""
    disk_bytes: int = 64 * 2**20
    """Size of the call's private writable tmpfs holding /work and /tmp together."""

    def __post_init__(self) -> None:
        for name in ("cpu_s", "wall_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise UserError(f"Limits.{name} must be a positive finite number of seconds, got {value!r}.")
        for name in ("memory_bytes", "nproc", "file_bytes", "nofile", "output_bytes", "disk_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise UserError(f"Limits.{name} must be a positive integer, got {value!r}.")
        if self.nofile < 8:
            raise UserError(f"Limits.nofile must be at least 8 (stdin/stdout/stderr and the interpreter's own), got {self.nofile}.")

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # scalars: no deep copy needed


@dataclass(frozen=True)
class ExecResult:
    """The structured outcome of one call. `stdout`/`stderr` are decoded as UTF-8 (bad bytes replaced)."""

    status: Status
    exit_code: int | None
    """The process's exit code; negative for death by signal; None when it never ran."""
    stdout: str
    stderr: str
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    wall_s: float = 0.0
    cpu_s: float = 0.0
    max_rss_bytes: int = 0
    """Largest resident set of one process of the call (getrusage)."""
    memory_peak_bytes: int = 0
    """Peak of everything the call held together (processes, memfds, tmpfs), from its own memory
    cgroup; 0 where per-call cgroups are unavailable."""
    reason: str = ""
    """One sentence on why the status is what it is (empty for `ok`)."""
    attempts: int = 1
    """How many times the call was started: more than 1 when a sandbox `crash` (an infrastructure
    fault) was retried (`Sandbox(crash_retries=...)`); the result is the last attempt's."""

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    def to_dict(self) -> dict:
        out = asdict(self)
        out["status"] = self.status.value
        return out
