"""How a process's C heap treats freed memory (`run.allocator`).

torch's CPU tensors come from the C library's `malloc`. With glibc's defaults a block of 32 MiB or more is its own
`mmap`, given back to the kernel when freed, and the top of the heap is trimmed whenever 128 KiB or more lies free
there. An RL step frees and re-allocates the same sizes every step (activations, gradients set to None after the
optimizer step, AdamW's temporaries, the logits chunks), so every step the kernel hands out and zeroes those pages
again: on SmolLM2-135M, 1.8 M page faults in three steps and, on a loaded machine, a third to a half of the
process's CPU time in the kernel (idle: a step 5 % longer than with `keep`; docs/performance_smollm2.md). `keep` tells
glibc to serve every block from the heap and never trim it, so freed memory is reused by the next step without a
fault: the resident set stays at its peak (what a caching allocator does); the peak itself moves little (measured:
tracerl's within run-to-run noise, TRL's up 8 % when it ran with the same settings). `system` leaves glibc's
defaults. Elsewhere than glibc (macOS, musl) both are the C library's defaults."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import sys

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_MAX = -4
_NEVER_TRIM = 2**31 - 1  # mallopt takes an int: trim only past 2 GiB free at the top
TUNABLES = f"glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold={_NEVER_TRIM}"  # the same, read by glibc at exec
_applied: str | None = None


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        libc.gnu_get_libc_version()
    except (OSError, AttributeError):
        return None  # not glibc
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return libc


def configure_allocator(mode: str) -> bool:
    """Apply `run.allocator` to this process and the processes it starts from now on (rollout workers, learner
    ranks, a local Ray runtime: through `GLIBC_TUNABLES`, which glibc reads when a process starts; nodes of a Ray
    cluster started elsewhere keep their own settings). True when glibc took the `keep` settings here. Settings are
    process-wide and are not undone: a process that kept freed memory once keeps it (`system` after `keep` changes
    nothing)."""
    global _applied
    if mode not in ("keep", "system"):
        raise ValueError(f"run.allocator is {mode!r}; use keep or system")
    if mode == "system" or _applied == "keep":
        return _applied == "keep"
    libc = _libc()
    if libc is None:
        return False
    ok = libc.mallopt(M_MMAP_MAX, 0) == 1  # every block from the heap, none its own mmap
    ok = libc.mallopt(M_TRIM_THRESHOLD, _NEVER_TRIM) == 1 and ok
    if ok:
        _applied = "keep"
        have = os.environ.get("GLIBC_TUNABLES", "")
        os.environ["GLIBC_TUNABLES"] = f"{have}:{TUNABLES}" if have else TUNABLES
    return ok


def page_faults() -> int:
    """This process's minor page faults so far (the kernel handing it a fresh zeroed page)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
