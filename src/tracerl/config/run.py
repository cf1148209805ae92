"""The `run:` section of a recipe: run name, directory, seed, threads, determinism and the rollout backend."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tracerl.config.base import Cfg


class RunConfig(Cfg):
    name: str = Field("default", min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
    """Run name; the run directory is `<root>/<name>-<timestamp>` (letters, digits, . _ + -; at most 100)."""
    root: str = Field("runs", min_length=1, max_length=1024, pattern=r"^[^\x00]+$")
    """Folder under which run directories are created."""
    dir: str | None = Field(None, min_length=1, max_length=1024, pattern=r"^[^\x00]+$")
    """Exact run directory to use instead of `<root>/<name>-<timestamp>`."""
    seed: int = Field(0, ge=0, lt=2**63)
    """Seed for model init, task generation, sampling and data order."""
    threads: int = Field(2, ge=1, le=1024)
    """torch intra-op threads (the default machine has 2 cores)."""
    deterministic: bool = True
    """Same seed, same weights at any `threads`: a CPU run uses torch's deterministic algorithms
    (`torch.use_deterministic_algorithms`). Without them, a backward that accumulates into repeated indices
    (the shared-prefix cache gather, train/shared_prefix.py) sums in thread order at threads > 1, and two runs
    of one seed drift apart by ~1e-7 per SFT pass. No measurable cost at threads=2 on the default 2-core CPU (CPU
    time 0.99x of off, side by side), where threads=1 instead would cost ~1.2x wall; a CUDA run keeps torch's
    defaults either way. torch's NaN fill of every new tensor that comes with these algorithms
    (`fill_uninitialized_memory`, a debugging guard that changes no number) is left off: it cost the default run
    5 % of its wall time and SmolLM2's learner ~7 % of its op time (models/device.py)."""
    allocator: Literal["keep", "system"] = "keep"
    """How the C heap treats freed memory (models/allocator.py). `keep`: freed blocks stay in the heap for the
    next step to reuse, none is given back to the kernel, so a step does not page-fault its activations, gradients
    and optimizer temporaries in again (on SmolLM2-135M, page faults in 3 steps 1.8 M -> 0.9 M; a step 5 % shorter
    idle, more under load; docs/performance_smollm2.md); the resident set stays at its peak. `system`: the C
    library's defaults. glibc only (elsewhere both are the defaults); applies to the processes the run starts, too."""
    progress: bool = True
    """Show progress bars for long stages."""
    backend: Literal["local", "ray"] = "local"
    """Where rollouts run: local (this process, or spawned processes in rl.mode async) or ray (Ray actors
    placed by the `ray:` section, the learner in this process; docs/ray.md)."""
