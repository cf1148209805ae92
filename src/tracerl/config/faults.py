"""The `faults:` section of a recipe: fault injection rates for tests and benchmarks (`tracerl/rollout/faults.py`
wraps environments and engines with them)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tracerl.config.base import Cfg

KINDS = ("tool_crash", "tool_hang", "garbage_output", "env_exception", "verifier_error")


class FaultsConfig(Cfg):
    tool_crash: float = Field(0.0, ge=0.0, le=1.0)
    """Probability that a step with a tool call fails as an infrastructure crash."""
    tool_hang: float = Field(0.0, ge=0.0, le=1.0)
    """Probability that a step hangs until its per-call timeout (`hang_s`), then fails."""
    slow_call: float = Field(0.0, ge=0.0, le=1.0)
    """Probability that a step takes `slow_s` longer but succeeds."""
    garbage_output: float = Field(0.0, ge=0.0, le=1.0)
    """Probability that a tool returns noise instead of its output (detected, labelled a fault)."""
    env_exception: float = Field(0.0, ge=0.0, le=1.0)
    """Probability that the environment's step raises."""
    verifier_error: float = Field(0.0, ge=0.0, le=1.0)
    """Probability that the reward of a finishing step cannot be computed."""
    tool_error: float = Field(0.0, ge=0.0, le=1.0)
    """Probability, per tool call, that the tool's observation is replaced by an error message (a transient
    error the policy sees: the episode goes on, it may call again or answer; not an infrastructure failure)."""
    tool_error_scope: Literal["episode", "task"] = "episode"
    """Whose draws `tool_error` uses: `episode` (seeded by the task id and the episode's reset seed: each member of
    a group meets its own errors) or `task` (seeded by the task id alone: call k of every episode of a task errs or
    not alike, so a group's members meet the same errors and the group baseline compares them under the same
    conditions; an exogenous error no longer lowers the advantage of whatever the unlucky members did)."""
    engine_error: float = Field(0.0, ge=0.0, le=1.0)
    """Probability, per row and turn, that the engine's generate fails for that row."""
    hang_s: float = Field(0.5, gt=0.0, le=600.0)
    """The per-call timeout a hang runs into (seconds)."""
    slow_s: float = Field(0.05, ge=0.0, le=600.0)
    """Extra seconds of a slow call (the median when `slow_sigma` > 0)."""
    slow_sigma: float = Field(0.0, ge=0.0, le=5.0)
    """Log-normal spread of a slow call: it takes slow_s · exp(σ·z), z standard normal (a long tail); 0 is fixed."""
    kill_learner_rank_at_step: int | None = Field(None, ge=1)
    """Kill the learner's last rank (a local process or Ray actor of `learner.ranks` > 1) just before RL update N:
    the run stops with one sentence and `tracerl train --resume RUN faults.kill_learner_rank_at_step=null` goes
    on from the last checkpoint (tests/reliability/test_learner_rank_loss.py)."""
    seed: int = Field(0, ge=0)
    """Seed of the fault draws (with the task id and reset seed)."""

    @property
    def active(self) -> bool:
        return any(getattr(self, k) > 0 for k in (*KINDS, "slow_call", "engine_error", "tool_error"))
