"""The `sampling:` section of a recipe: how rollouts sample the policy."""

from __future__ import annotations

from pydantic import Field

from tracerl.config.base import Cfg


class SamplingConfig(Cfg):
    temperature: float = Field(1.0, gt=0.0, le=100.0, allow_inf_nan=False)
    """Softmax temperature; behavior log-probs are under this tempered distribution."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass."""
    top_k: int = Field(0, ge=0)
    """Top-k sampling (0 disables)."""
