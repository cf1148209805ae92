"""Gates: recipe-declared limits that stop training when a run stops being interpretable.

A stop condition is part of an experiment: a reward curve after an
entropy collapse or a verifier exploit cannot be read. Each gate watches one metric of
`step_metrics` and trips after `patience` consecutive steps outside its limit. A step where the
metric is missing or NaN neither trips nor resets the count. `kl_max` watches the larger of
`policy/approx_kl` and `async/kl_behavior`: in async mode the update clips around the proximal policy,
so `policy/approx_kl` is only the update's own drift and staleness is the other part of the distance
to what sampled; `ess_frac_floor` reads async's `async/ess_frac` where no correction reports one.

On a trip the trainer saves a checkpoint and the sampler state, records a store event of kind
"gate" with `GateTrip.as_dict()` as payload, and raises `GateTripped`, whose `exit_code` (3) the
CLI returns.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

from tracerl.config.gates import GatesConfig

EXIT_CODE = 3


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
    metric: tuple[str, ...]  # the first name present in a step's metrics is checked (`largest`: the largest)
    bound: Literal["min", "max"]
    limit: float
    patience: int
    largest: bool = False


def _rules(cfg: GatesConfig) -> list[_Rule]:
    named = [("entropy_floor", ("policy/entropy",), "min", cfg.entropy_floor, cfg.entropy_patience),
             ("kl_max", ("policy/approx_kl", "async/kl_behavior"), "max", cfg.kl_max, cfg.patience),
             ("kl_ref_max", ("policy/kl_ref", "policy/kl_k3"), "max", cfg.kl_ref_max, cfg.patience),
             # recomputed from log-probs (telemetry) or reported by an importance correction (algorithms)
             ("ess_frac_floor", ("is/ess_frac", "policy/ess_frac", "async/ess_frac"), "min", cfg.ess_frac_floor,
              cfg.patience),
             ("truncation_rate_max", ("rollout/truncation_rate",), "max", cfg.truncation_rate_max, cfg.patience),
             ("audit_failures_max", ("verifier/audit_failures",), "max", cfg.audit_failures_max, cfg.patience),
             ("probe_logprob_diff_max", ("probe/logprob_absdiff_max",), "max", cfg.probe_logprob_diff_max, cfg.patience)]
    rules = [_Rule(g, m, b, float(v), p, largest=g == "kl_max") for g, m, b, v, p in named if v is not None]
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
            present = [m for m in rule.metric if metrics.get(m) is not None and not math.isnan(float(metrics[m]))]
            name = (max(present, key=lambda m: float(metrics[m])) if rule.largest and present
                    else present[0] if present else rule.metric[0])
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
