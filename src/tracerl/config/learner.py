"""The `learner:` section of a recipe: how many processes train the policy (`train/fsdp_group.py`) and how
it scores a minibatch (`train/shared_prefix.py`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tracerl.config.base import Cfg


class LearnerConfig(Cfg):
    ranks: int = Field(1, ge=1, le=64)
    """Learner ranks of the RL stage; above 1 the policy is sharded over them with FSDP2 (gloo on CPU, NCCL
    on CUDA with one GPU per rank), the ranks local processes or Ray actors (`placement.learner`,
    config/placement.py), and each minibatch's rows are split across them (whole minibatches on every rank for losses
    normalised over the minibatch: MIS, NLL, Clip-Cov, KL-Cov, MOPD), with the single-process update's
    result; the critic, PRM, teachers and reference stay in the trainer's process (docs/training.md,
    "Sharded learner (FSDP2)"). 1: the policy trains in the trainer's process."""
    share_prefix: bool = True
    """Run the prefix common to a minibatch's rows (system prompt, template) and each distinct prompt
    once, and only the rows' continuations per row (`train/shared_prefix.py`), in the RL learner and
    in SFT: the same log-probs and gradients up to float rounding, about half the learner's forward
    and backward on GRPO groups. false: every row runs its whole sequence."""
    packing: bool = False
    """Score the policy's minibatches packed: rows end to end without padding, position ids restarting per
    row, attention confined to each row by a block-diagonal causal mask (`train/packing.py`); the same
    log-probs and gradients up to float rounding, Σ lengths tokens per forward instead of rows × longest.
    Needs `share_prefix: false` (the shared-prefix split runs rows padded on a common cache); any number of ranks.
    false: rows padded to the minibatch's longest."""
    max_tokens_per_micro_batch: int | None = Field(None, ge=1)
    """Token budget of one forward and backward: each minibatch's rows run in micro-batches of at most this
    many tokens (Σ lengths when packed, rows × longest when padded; a longer row runs alone), their
    gradients summed into the minibatch's one optimizer step (the same step, up to float rounding). Needs
    an algorithm whose loss is a sum over rows (not MIS, NLL, Clip-Cov, KL-Cov or MOPD); on several ranks each runs
    its rows' micro-batches, padded to the ranks' largest count with zero-weight forwards.
    null: a minibatch runs whole."""
    optimizer: Literal["adamw", "adamw_fused"] = "adamw"
    """The AdamW kernel of every model the run trains (the policy in one process or on every rank, the critic,
    the PRM, SFT). adamw: torch's default (on a CPU a loop over the parameters, several elementwise passes
    each). adamw_fused: torch's fused kernel, one pass over all parameters (TRL's default, `adamw_torch_fused`):
    the same update up to float rounding (at most 4e-9 apart after one step, docs/performance.md), an optimizer
    step ~4.5× faster on a CPU for SmolLM2-135M (in the RL loop at 2 threads: 0.16 s off a 4 s learner step)."""
    checkpoint_format: Literal["full", "sharded"] = "full"
    """How a learner of several ranks checkpoints the policy's training state. full: the AdamW moments are
    gathered to rank 0 after every step and saved in the trainer state, in the single-process format.
    sharded: each rank writes its own shard of the policy's weights and moments (torch.distributed.checkpoint
    as safetensors, the checkpoint's `policy_shards/`, train/shards.py) and nothing is gathered for them;
    `--resume` reads them back under any number of ranks (DCP reshards; one rank included). Either way the
    checkpoint folder also holds the consolidated weights a plain Hugging Face `from_pretrained` loads.
    Needs `ranks` above 1."""

    @model_validator(mode="after")
    def _sharded_needs_ranks(self):
        if self.checkpoint_format == "sharded" and self.ranks == 1:
            raise ValueError("learner.checkpoint_format: sharded needs learner.ranks above 1 (one process has no "
                             "shards to write); set learner.ranks=2 or more, or learner.checkpoint_format=full")
        return self
