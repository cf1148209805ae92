"""Gates: recipe-declared limits that stop training when a run stops being interpretable.

A stop condition is part of an experiment: a reward curve after an
entropy collapse or a verifier exploit cannot be read. Each gate watches one metric of
`step_metrics` and trips after `patience` consecutive steps outside its limit. A step where the
metric is missing or NaN neither trips nor resets the count.

On a trip the trainer saves a checkpoint and the sampler state, records a store event of kind
"gate" with `GateTrip.as_dict()` as payload, and raises `GateTripped`, whose `exit_code` (3) the
CLI returns.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

EXIT_CODE = 3


class MetricLimit(BaseModel):
    """A gate on any metric by name."""

    model_config = ConfigDict(extra="forbid")
    metric: str = Field(description="Metric name as logged, e.g. 'tool/error_rate'.")
    min: float | None = Field(None, description="Trip when the metric is below this value.")
    max: float | None = Field(None, description="Trip when the metric is above this value.")
    patience: int = Field(1, ge=1, description="Consecutive steps outside the limit before the gate trips.")


class GatesConfig(BaseModel):
    """Limits that stop an RL stage. Every gate is off (None) unless the recipe sets it."""

    model_config = ConfigDict(extra="forbid")
    entropy_floor: float | None = Field(
        None, description="Trip when mean action-token entropy ('policy/entropy', nats) stays below this.")
    entropy_patience: int = Field(
        3, ge=1, description="Consecutive steps below entropy_floor before the entropy gate trips.")
    kl_max: float | None = Field(
        None, description="Trip when the approximate KL to the behavior policy ('policy/approx_kl') exceeds this.")
    kl_ref_max: float | None = Field(
        None, description="Trip when the KL to the reference policy ('policy/kl_ref', else 'policy/kl_k3') exceeds this.")
    ess_frac_floor: float | None = Field(
        None, description="Trip when the importance-weight ESS fraction ('is/ess_frac', else 'policy/ess_frac') falls below this.")
    truncation_rate_max: float | None = Field(
        None, description="Trip when the fraction of truncated episodes ('rollout/truncation_rate') exceeds this.")
    audit_failures_max: float | None = Field(
        None, description="Trip when verifier audit failures ('verifier/audit_failures') exceed this count.")
    audit_every: int = Field(
        10, ge=1, description="With audit_failures_max set: replay the environment's verifier audit set every N RL steps.")
    probe_logprob_diff_max: float | None = Field(
        None, description="Trip when the engine-consistency probe's max |engine − learner| log-prob "
        "('probe/logprob_absdiff_max') exceeds this.")
    probe_every: int = Field(
        10, ge=1, description="With probe_logprob_diff_max set: run the engine-consistency probe at step 1 and every N steps.")
    patience: int = Field(
        1, ge=1, description="Consecutive steps outside the limit before the KL, ESS, truncation, audit or probe gate trips.")
    extra: list[MetricLimit] = Field(
        default_factory=list, description="Further limits on any logged metric, e.g. tool/error_rate max 0.5.")

    @model_validator(mode="after")
    def _audit_every_needs_the_gate(self) -> "GatesConfig":
        if self.audit_every != 10 and self.audit_failures_max is None:  # by value: a resolved config round-trips
            raise ValueError("gates.audit_every only matters with gates.audit_failures_max set; set both or neither")
        if self.probe_every != 10 and self.probe_logprob_diff_max is None:
            raise ValueError("gates.probe_every only matters with gates.probe_logprob_diff_max set; set both or neither")
        return self


@dataclasses.dataclass(frozen=True)
class GateTrip:
    """Which gate fired, at which step, with the value, the limit and a sentence for people."""

    gate: str
    step: int
    value: float
    limit: float
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class GateTripped(Exception):
    """Raised by the trainer after saving state; the CLI exits with `exit_code`."""

    exit_code = EXIT_CODE

    def __init__(self, trip: GateTrip):
        self.trip = trip
        super().__init__(trip.reason)


@dataclasses.dataclass(frozen=True)
class _Rule:
    gate: str
    metric: tuple[str, ...]  # the first name present in a step's metrics is checked
    bound: Literal["min", "max"]
    limit: float
    patience: int


def _rules(cfg: GatesConfig) -> list[_Rule]:
    named = [("entropy_floor", ("policy/entropy",), "min", cfg.entropy_floor, cfg.entropy_patience),
             ("kl_max", ("policy/approx_kl",), "max", cfg.kl_max, cfg.patience),
             ("kl_ref_max", ("policy/kl_ref", "policy/kl_k3"), "max", cfg.kl_ref_max, cfg.patience),
             # recomputed from log-probs (telemetry) or reported by an importance correction (algorithms)
             ("ess_frac_floor", ("is/ess_frac", "policy/ess_frac"), "min", cfg.ess_frac_floor, cfg.patience),
             ("truncation_rate_max", ("rollout/truncation_rate",), "max", cfg.truncation_rate_max, cfg.patience),
             ("audit_failures_max", ("verifier/audit_failures",), "max", cfg.audit_failures_max, cfg.patience),
             ("probe_logprob_diff_max", ("probe/logprob_absdiff_max",), "max", cfg.probe_logprob_diff_max, cfg.patience)]
    rules = [_Rule(g, m, b, float(v), p) for g, m, b, v, p in named if v is not None]
    for lim in cfg.extra:
        for bound in ("min", "max"):
            if getattr(lim, bound) is not None:
                rules.append(_Rule(f"{lim.metric}:{bound}", (lim.metric,), bound, float(getattr(lim, bound)), lim.patience))
    return rules


class GateMonitor:
    """Feed it each step's metrics; it returns the first gate that trips, or None."""

    def __init__(self, config: GatesConfig | None = None):
        self.config = config or GatesConfig()
        self.rules = _rules(self.config)
        self.streaks: dict[str, int] = {r.gate: 0 for r in self.rules}

    @property
    def active(self) -> bool:
        return bool(self.rules)

    def update(self, step: int, metrics: dict[str, float]) -> GateTrip | None:
        trip = None
        for rule in self.rules:
            name = next((m for m in rule.metric if metrics.get(m) is not None), rule.metric[0])
            value = metrics.get(name)
            if value is None or math.isnan(float(value)):
                continue
            value = float(value)
            outside = value < rule.limit if rule.bound == "min" else value > rule.limit
            self.streaks[rule.gate] = self.streaks[rule.gate] + 1 if outside else 0
            if trip is None and self.streaks[rule.gate] >= rule.patience:
                side = "below the floor" if rule.bound == "min" else "above the limit"
                trip = GateTrip(rule.gate, step, value, rule.limit,
                                f"gate {rule.gate}: {name} = {value:.6g} {side} {rule.limit:g} "
                                f"for {self.streaks[rule.gate]} consecutive step(s) (patience {rule.patience}) at step {step}")
        return trip

    def state_dict(self) -> dict[str, int]:
        """Streak counts, saved in the trainer state so a resumed run keeps counting."""
        return dict(self.streaks)

    def load_state_dict(self, state: dict[str, int]) -> None:
        for gate, n in state.items():
            if gate in self.streaks:
                self.streaks[gate] = int(n)
