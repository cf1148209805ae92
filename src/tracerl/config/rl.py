"""The `rl:` section of a recipe: steps, stages, batch sizes, the algorithm, truncation policy (see `tracerl.config`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from tracerl.algorithms.spec import AlgorithmConfig
from tracerl.algorithms.spec.critic_free import GRPO
from tracerl.config.base import Cfg
from tracerl.config.tasks import TasksConfig


class RLStageConfig(Cfg):
    """One stage of a multi-stage RL run (rStar2-Agent's RL-1/2/3, Skywork's staged context growth).

    Unset fields inherit from the previous stage (the first stage inherits from `rl`, `env` and
    `tasks`). The stage boundary is stored as an event and logged as `rl/stage`.
    """

    name: str
    """Stage name (recorded at the boundary; profiles are saved as profiles/<name>.json)."""
    steps: int = Field(ge=1)
    """RL steps in this stage."""
    tasks: TasksConfig | None = None
    """Task pool, filters and sampler of this stage; null keeps the previous stage's."""
    prompts_per_step: int | None = Field(None, ge=1)
    """Tasks per step in this stage."""
    group_size: int | None = Field(None, ge=1)
    """Rollouts per task in this stage."""
    max_turns: int | None = Field(None, ge=1)
    """Policy turns per episode in this stage."""
    max_tokens: int | None = Field(None, ge=1)
    """Episode length budget (prompt included) in this stage."""
    max_new_tokens: int | None = Field(None, ge=1)
    """Tokens per policy turn in this stage."""
    reset_optimizer: bool = False
    """Start this stage with fresh AdamW moments and learning-rate warm-up."""
    reset_reference: bool = False
    """Make the current policy the KL reference from this stage on (matters when rl.algorithm.kl.coef > 0)."""
    envs: list[str] | None = None
    """The run's environments this stage trains on (a domain cascade: math_tool, then code_tests, ...);
    null keeps the previous stage's (the first stage: all of `envs:`)."""


class RLConfig(Cfg):
    steps: int = Field(60, ge=0)
    """RL optimizer steps (each on a fresh batch of rollouts); with `stages`, set to the sum of their steps."""
    stages: list[RLStageConfig] = Field(default_factory=list)
    """Multi-stage RL: stages run in order inside the `rl` stage; empty means one stage of `steps` steps."""
    max_generated_tokens: int | None = Field(None, ge=1)
    """Stop RL early once this many policy (ACTION) tokens were generated, profiling included."""
    prompts_per_step: int = Field(16, ge=1)
    """Tasks sampled per step."""
    group_size: int = Field(8, ge=1)
    """Rollouts per task in the group (an algorithm may roll out more and keep this many: RoC)."""
    algorithm: AlgorithmConfig = Field(default_factory=GRPO)
    """The RL algorithm: `name` (grpo, dr_grpo, rloo, reinforce_pp, reinforce_pp_baseline, dapo, ...) and its
    parameters (clip, aggregation, kl, entropy, correction, shaping, selection); `tracerl algorithms` lists them."""
    lr: float = Field(5e-4, gt=0)
    """Peak learning rate (AdamW, reached after a 3-step warm-up)."""
    lr_schedule: Literal["constant", "cosine"] = "constant"
    """The policy's rate after the warm-up (critic and PRM keep their own): constant, or cosine decay towards
    `min_lr_ratio` × `lr` over `rl.steps` (veRL's `lr_scheduler_type: cosine`; a loss with a fixed target, such
    as distillation, settles nearer it as it decays)."""
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    """With `lr_schedule: cosine`, the fraction of `lr` left at the last step."""
    minibatches: int = Field(2, ge=1)
    """Optimizer steps per batch of rollouts (PPO-style, on the same rollouts)."""
    whole_groups: bool = False
    """true: minibatches keep each group's rows together (veRL's layout), cut at the group boundary
    nearest an equal share of rows, so the tokens a group's rows share get no net push from any one
    optimizer step; false: rows shuffled across minibatches, as every figure in docs/ was measured
    (train/update.py, `minibatch_rows`)."""
    max_grad_norm: float = Field(1.0, gt=0)
    """Gradient clipping."""
    truncation: Literal["penalize", "mask", "keep"] = "mask"
    """Truncated episodes: reward `truncation_penalty` (penalize), excluded from the loss (mask), or kept as scored."""
    truncation_penalty: float = -1.0
    """Reward of a truncated episode under `truncation: penalize`."""
    tool_cost: float = Field(0.0, ge=0, allow_inf_nan=False)
    """Price of one tool call: each episode's reward used for advantages is lowered by tool_cost × the tool calls
    the policy made in it (observations the env attributed to a named tool, as `tool/calls` counts them), after
    the truncation policy, in `collate` (every mode and algorithm); logged as `reward/tool_cost` (mean cost paid
    per episode). 0 leaves every number as it was. Selection (dynamic sampling) still sees the outcome reward."""
    eval_every: int = Field(20, ge=0)
    """Held-out evaluation every N steps (0: only at the eval stages)."""
    checkpoint_every: int = Field(20, ge=0)
    """Save a resumable checkpoint every N steps (0: only at the end)."""
    mode: Literal["sync", "async"] = "sync"
    """sync: generate, then learn, one after the other; async: rollout worker processes generate while the
    learner trains, under the staleness bound `max_staleness` (docs/async.md)."""
    max_staleness: int = Field(1, ge=0, le=64)
    """Async: η, the most policy versions a trained token may lag the learner (AReaL's bound); a rollout
    starts only within it and a batch rejects (and counts) what fell beyond it."""
    partial_rollouts: bool = True
    """Async: a weight update may land between the turns of an episode (later turns use the new version)."""

    @field_validator("algorithm", mode="before")
    @classmethod
    def _default_name(cls, value: Any) -> Any:  # `rl.algorithm.clip_high=0.3` alone tunes the default algorithm
        if isinstance(value, dict) and "name" not in value:
            return {"name": "grpo", **value}
        return value

    @model_validator(mode="after")
    def _async_fields_are_used(self) -> RLConfig:
        if self.mode == "sync":  # by value: a resolved config round-trips
            changed = [f"rl.{k}" for k, d in (("max_staleness", 1), ("partial_rollouts", True)) if getattr(self, k) != d]
            if changed:
                raise ValueError(f"{', '.join(changed)} applies only with rl.mode: async")
        return self

    @model_validator(mode="after")
    def _schedule_is_used(self) -> RLConfig:
        if self.lr_schedule == "constant" and self.min_lr_ratio != 0.1:  # by value: a resolved config round-trips
            raise ValueError("rl.min_lr_ratio applies only with rl.lr_schedule: cosine; set rl.lr_schedule=cosine or "
                             "remove rl.min_lr_ratio")
        if self.lr_schedule == "cosine" and any(st.reset_optimizer for st in self.stages):
            raise ValueError("rl.lr_schedule: cosine decays over the whole run, and a stage's reset_optimizer would "
                             "restart it; use rl.lr_schedule: constant with reset_optimizer, or drop reset_optimizer")
        return self

    @model_validator(mode="after")
    def _penalty_is_used(self) -> RLConfig:
        if self.truncation_penalty != -1.0 and self.truncation != "penalize":  # by value: a resolved config round-trips
            raise ValueError(f"rl.truncation_penalty applies only with rl.truncation: penalize (got {self.truncation!r})")
        return self
