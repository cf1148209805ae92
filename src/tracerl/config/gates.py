"""The `gates:` section of a recipe: limits that stop RL cleanly when a run stops being interpretable
(`telemetry/gates.py` watches them)."""

from __future__ import annotations

from pydantic import Field, model_validator

from tracerl.config.base import Cfg


class MetricLimit(Cfg):
    """A gate on any metric by name."""

    metric: str = Field(description="Metric name as logged, e.g. 'tool/error_rate'.")
    min: float | None = Field(None, description="Trip when the metric is below this value.")
    max: float | None = Field(None, description="Trip when the metric is above this value.")
    patience: int = Field(1, ge=1, description="Consecutive steps outside the limit before the gate trips.")


class GatesConfig(Cfg):
    """Limits that stop an RL stage. Every gate is off (None) unless the recipe sets it."""

    entropy_floor: float | None = Field(
        None, description="Trip when mean action-token entropy ('policy/entropy', nats) stays below this.")
    entropy_patience: int = Field(
        3, ge=1, description="Consecutive steps below entropy_floor before the entropy gate trips.")
    kl_max: float | None = Field(
        None, description="Trip when the approximate KL to the behavior policy exceeds this: 'policy/approx_kl', or in "
                          "async mode the larger of it and 'async/kl_behavior' (staleness).")
    kl_ref_max: float | None = Field(
        None, description="Trip when the KL to the reference policy ('policy/kl_ref', else 'policy/kl_k3') exceeds this.")
    ess_frac_floor: float | None = Field(
        None, description="Trip when the importance-weight ESS fraction ('is/ess_frac', else 'policy/ess_frac', else "
                          "async's 'async/ess_frac') falls below this.")
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
