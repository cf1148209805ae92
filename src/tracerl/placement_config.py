"""Where models run and how they are trained: devices, autocast, gradient checkpointing, LoRA
(the `model:` keys of a recipe beyond the model's identity; docs/training.md, "Devices, precision and LoRA").

Kept beside `tracerl.config`, which adds these fields to `ModelConfig`; `models/device.py`,
`models/precision.py` and `models/lora.py` act on them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

DEVICE_PATTERN = r"^(auto|cpu|cuda(:[0-9]{1,3})?)$"
"""`auto` (cuda when torch sees one, else cpu), `cpu`, `cuda` or `cuda:N`."""


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)


class LoraSettings(_Cfg):
    r: int = Field(8, gt=0, le=4096)
    """Rank of each adapter (A: r × in, B: out × r; B starts at zero, so the adapted model starts as the base)."""
    alpha: float = Field(16.0, gt=0)
    """Scale numerator: the update is (alpha / r) · B A."""
    dropout: float = Field(0.0, ge=0, lt=1)
    """Dropout on the adapter's input while training (off in rollouts and scoring, which run in eval mode)."""
    target_modules: list[str] | Literal["all-linear"] = "all-linear"
    """Module names (the last part, e.g. q_proj, v_proj) that get an adapter; `all-linear` is every linear
    layer but the output layer."""


class PlacementFields(_Cfg):
    """The fields `ModelConfig` inherits (documented once here)."""

    device: str = Field("auto", pattern=DEVICE_PATTERN)
    """Device of the policy and the rollout engine (they share the weights): auto (cuda when available,
    else cpu), cpu, cuda or cuda:N. Roles name their own (`roles.*.device`, `model.reference_device`)."""
    reference_device: str | None = Field(None, pattern=DEVICE_PATTERN)
    """Device of the frozen KL reference; null is `model.device`. With LoRA the reference is the policy
    with its adapter disabled, so it lives where the policy does."""
    autocast: Literal["bf16"] | None = None
    """bf16 autocast around every model forward (rollout engine, learner scoring, SFT, critic); weights
    and optimizer state stay in `model.dtype`. Null runs in `model.dtype` throughout."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass (Hugging Face
    gradient_checkpointing_enable, non-reentrant): less learner memory, about one more forward of time."""
    lora: LoraSettings | None = None
    """LoRA adapters through peft (`pip install 'tracerl[lora]'`); null trains every weight. The adapter is
    attached at load for `model.path`, and after the SFT stages that train the freshly built tiny model
    (LoRA on a random init learns little)."""


def placement_problem(recipe) -> str | None:
    """What the recipe combines that these keys do not support yet, as one sentence (None when fine)."""
    m = recipe.model
    if m.lora is not None:
        if any(s.reset_reference for s in recipe.rl.stages):
            return ("with model.lora the KL reference is the base model (the adapter disabled), so an RL stage cannot "
                    "reset it to the current policy; drop reset_reference or set model.lora=null")
        if m.reference_device not in (None, m.device):
            return ("with model.lora the reference is the policy itself with its adapter disabled, so "
                    "model.reference_device cannot differ from model.device; leave it null")
    return None
