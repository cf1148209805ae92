"""`run.backend` and the `ray:` section of a recipe (docs/ray.md).

`run.backend: local` runs rollouts in the trainer's process (sync) or in spawned processes (async);
`run.backend: ray` runs them in Ray actors placed by the resource spec below, with the learner in the
driver. What does not combine with a backend is refused in `config/combinations.py`.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from tracerl.config.base import Cfg


class RayConfig(Cfg):
    address: str | None = Field(None, min_length=1, max_length=1024)
    """null starts a local Ray runtime for the run (shut down at its end); `auto`, `host:port` or
    `ray://host:port` connects to a running cluster (left running)."""
    num_cpus: int = Field(2, ge=1, le=4096)
    """CPUs of the local runtime (address null only; a cluster has its own)."""
    num_cpus_per_worker: float = Field(1.0, gt=0, le=1024)
    """CPUs each rollout actor reserves (Ray's `num_cpus`)."""
    num_gpus_per_worker: float = Field(0.0, ge=0, le=64)
    """GPUs each rollout actor reserves (Ray's `num_gpus`); the actor's engine then runs on its first GPU."""
    object_store_mb: int = Field(512, ge=64, le=1 << 20)
    """Object store of the local runtime in MiB (weights travel through it; Ray spills what does not fit)."""

    @model_validator(mode="after")
    def _local_fields(self) -> RayConfig:
        if self.address is not None:
            changed = [f"ray.{k}" for k, d in (("num_cpus", 2), ("object_store_mb", 512)) if getattr(self, k) != d]
            if changed:
                raise ValueError(f"{', '.join(changed)} sizes the local Ray runtime, which ray.address "
                                 f"{self.address!r} does not start; drop {' and '.join(changed)}")
        return self


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def check_ray(recipe) -> str | None:
    """The first `ray:` setting that has no place or cannot be met (an actor that would wait forever), as one
    sentence."""
    ray = recipe.ray
    if recipe.run.backend == "local":
        if ray != RayConfig():
            return "the ray: section applies only with run.backend: ray; set run.backend=ray or drop ray:"
    else:
        workers = recipe.rollout.workers
        if ray.address is None and workers * ray.num_cpus_per_worker > ray.num_cpus:
            return (f"{workers} rollout actor(s) × ray.num_cpus_per_worker {ray.num_cpus_per_worker:g} need more than "
                    f"the local runtime's ray.num_cpus {ray.num_cpus}, so an actor would wait forever; raise "
                    "ray.num_cpus or lower rollout.workers / ray.num_cpus_per_worker")
        if ray.address is None and ray.num_gpus_per_worker > 0 and not _cuda_available():
            return (f"ray.num_gpus_per_worker {ray.num_gpus_per_worker:g} asks for a GPU, and the local Ray runtime "
                    "sees none; set ray.num_gpus_per_worker=0 or connect to a GPU cluster with ray.address")
    return None
