"""The recipe's `engine:` section: which rollout engine samples the policy (docs/engines.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

_VLLM_ONLY = ("gpu_memory_utilization", "max_model_len", "enforce_eager")


class EngineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)  # as every section

    name: Literal["torch", "hf", "vllm"] = "torch"
    """`torch`: the built-in KV-cache engine on the learner's own module (a weight sync is a version bump);
    `hf`: Hugging Face `model.generate` on a copy of the weights, synced after every update; `vllm`: an
    in-process `vllm.LLM` (GPU only, `pip install 'tracerl[vllm]'`), synced by version without a restart."""
    dtype: Literal["float32", "bfloat16", "float16"] | None = None
    """dtype of the engine's own copy of the weights (`hf`, `vllm`); null: the learner's dtype
    (`model.dtype`). A copy in another dtype than the learner's samples a slightly different policy,
    which the engine probe (`gates.probe_logprob_diff_max`) measures."""
    gpu_memory_utilization: float = Field(0.35, gt=0.0, le=0.95)
    """`vllm`: share of the GPU's memory vLLM may take (weights + KV cache); the learner needs the rest."""
    max_model_len: int | None = Field(None, ge=16)
    """`vllm`: the longest sequence (prompt + completion) it serves; null: `env.max_tokens`."""
    enforce_eager: bool = False
    """`vllm`: no CUDA graphs (slower decoding, faster start-up and less memory)."""

    @model_validator(mode="after")
    def _keys_of_the_engine(self) -> EngineConfig:
        if self.name == "torch" and self.dtype is not None:
            raise ValueError("engine.dtype is the dtype of an engine's own weight copy (engine.name hf or vllm); the torch "
                             "engine samples from the learner's module, so set model.dtype instead or unset engine.dtype")
        if self.name != "vllm":
            # by value, not by "was it set": a resolved config (config.yaml) round-trips
            set_here = [k for k in _VLLM_ONLY if getattr(self, k) != type(self).model_fields[k].default]
            if set_here:
                raise ValueError(f"engine.{set_here[0]} applies to engine.name vllm only; unset it or set engine.name=vllm")
        return self


def check_engine(recipe) -> str | None:
    """One sentence naming what an engine other than torch does not run with, or None.

    Every engine with its own copy of the weights (hf, vllm; in the trainer, in rollout worker processes
    and in Ray actors) loads the policy as a plain model at each sync (`models/weights.py`: LoRA merged
    in) and samples under its autocast, so engines combine with rl.mode, run.backend, model.lora,
    model.autocast and learner.ranks."""
    name = recipe.engine.name
    if name == "vllm" and recipe.gateway.agent:
        return ("engine.name vllm does not run gateway.agent (the gateway serves the engine's calls in the trainer's "
                "process, and vLLM's offline LLM is no server of per-call spans); use engine.name torch or hf")
    return None
