"""The `eval:` section of a recipe: the frozen held-out evaluation protocol and its fault slices."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tracerl.config.base import Cfg


class EvalConfig(Cfg):
    tasks: int = Field(200, ge=1, le=10**7)
    """Held-out tasks evaluated (taken in order from the held-out split)."""
    samples: int = Field(4, ge=1, le=10**4)
    """Samples per task (avg@n and pass@k use them)."""
    temperature: float = Field(1.0, gt=0.0, le=100.0, allow_inf_nan=False)
    """Sampling temperature of the frozen protocol."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus mass of the frozen protocol."""
    k: list[int] = Field(default_factory=lambda: [1, 4], min_length=1, max_length=64)
    """pass@k values reported (each between 1 and `samples`)."""
    slices: list[Literal["tool_error", "tool_error_once", "tool_wrong", "faults"]] = Field(default_factory=list, max_length=4)
    """Fault slices evaluated beside the clean held-out run (same tasks and seed): every tool observation an
    error (the tool is down), the first tool call of each episode an error (recoverable by calling again), every
    tool number off by one, or the recipe's `faults:` (eval/slices.py)."""

    @model_validator(mode="after")
    def _k_within_samples(self) -> EvalConfig:
        bad = [k for k in self.k if not 1 <= k <= self.samples]
        if bad:
            raise ValueError(f"eval.k values must be between 1 and eval.samples ({self.samples}), got {bad}")
        return self
