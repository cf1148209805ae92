"""The `sft:` section of a recipe: where SFT examples come from (expert, a conversations file,
rejection sampling from the current policy) and how they are trained (run/sft_stage.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tracerl.config.base import Cfg


class RejectionConfig(Cfg):
    samples: int = Field(4, ge=1, le=1024)
    """Completions sampled per task from the current policy (recipe `sampling`); the verifier's successes are kept."""
    max_tasks: int = Field(256, ge=1, le=10**7)
    """Training tasks sampled from (the first ones of the pool)."""
    epochs: int = Field(2, ge=1, le=10**4)
    """Passes over the kept completions."""
    lr: float | None = Field(None, gt=0.0, le=10.0, allow_inf_nan=False)
    """Peak learning rate of the pass; None uses `sft.lr`."""


class SFTConfig(Cfg):
    source: Literal["expert", "data", "rejection"] = "expert"
    """Where the `sft` stage's examples come from: the env's scripted expert, a conversations file
    (`sft.data`, set alone it implies `data`), or rejection sampling from the current policy (`sft.rejection`)."""
    data: str | None = Field(None, min_length=1, max_length=4096)
    """JSONL file of OpenAI-style `messages` conversations (tool calls in the env's grammar); see train/sft_data.py."""
    rejection: RejectionConfig = Field(default_factory=RejectionConfig)
    """Rejection-sampled SFT (RFT / STaR): used by `sft.source: rejection` and by an `rft` stage."""
    demos: int = Field(2000, ge=1, le=10**7)
    """Expert demonstrations generated through the environment (`sft.source: expert`)."""
    expert_tool_rate: float = Field(0.5, ge=0.0, le=1.0)
    """Probability that a demonstration uses the tool (the rest answer directly)."""
    expert_error_rate: float | None = Field(None, ge=0.0, le=1.0)
    """Error rate of the scripted expert (envs whose expert takes `error_rate`); None keeps the env's default."""
    epochs: int = Field(3, ge=1, le=10**4)
    """Passes over the demonstrations."""
    batch_size: int = Field(32, ge=1, le=10**6)
    """Sequences per optimizer step."""
    lr: float = Field(3e-3, gt=0.0, le=10.0, allow_inf_nan=False)
    """Peak learning rate (AdamW, linear warm-up then cosine decay)."""
    weight_decay: float = Field(0.0, ge=0.0, le=10.0, allow_inf_nan=False)
    """AdamW weight decay."""


def check_sft_source(r) -> None:
    """`sft.data` alone implies `sft.source: data`; a setting its source never reads is refused."""
    sft = r.sft
    if sft.data is not None and "source" not in sft.model_fields_set:
        object.__setattr__(sft, "source", "data")
    if sft.source == "data" and sft.data is None:
        raise ValueError("sft.source is data but sft.data names no file; set sft.data=PATH to a JSONL of conversations")
    if sft.data is not None and sft.source != "data":
        raise ValueError(f"sft.data is only read when sft.source is data (it is {sft.source}); drop one of them")
    rejects = sft.source == "rejection" and "sft" in r.stages
    if sft.rejection != RejectionConfig() and not rejects and "rft" not in r.stages:  # a dumped default is fine
        raise ValueError("sft.rejection is set but nothing rejection-samples; set sft.source=rejection or add an rft stage")
    if r.model.path is None:
        first = next((s for s in r.stages if s == "rft" or (s == "sft" and rejects)), None)
        sft_first = next((s for s in r.stages if s == "sft"), None)
        if first is not None and (sft_first is None or rejects or r.stages.index(first) < r.stages.index(sft_first)):
            raise ValueError("rejection sampling needs a policy that already solves some tasks, and the tiny model starts "
                             "untrained; put an rft stage after an expert sft stage (stages=[sft,eval,rft,eval]) or set model.path")
