"""Reward composition: named components times weights, every input kept, nothing non-finite.

Weights are checked when the composer is built (unknown component names fail before any
rollout, CONVENTIONS.md 6); each `compose` stores the raw components, the weights and the sum,
and refuses NaN or infinite values with an error that names the component.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tracerl.verifiers.base import VerifierResult


class RewardError(ValueError):
    """A reward cannot be composed (non-finite value, missing or unknown component)."""


@dataclass(frozen=True)
class ComposedReward:
    reward: float
    components: dict[str, float]
    """Every component as the verifier produced it, weighted or not."""
    weights: dict[str, float]
    raw: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"reward": self.reward, "reward_components": dict(self.components),
                "reward_weights": dict(self.weights), "verifier_output": self.raw}


def _finite(kind: str, name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RewardError(f"{kind} {name!r} must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise RewardError(f"{kind} {name!r} is {value!r}; rewards must be finite — fix the verifier or its input")
    return float(value)


class RewardComposer:
    """reward = Σ weight[name] · component[name]. Components without a weight are stored, not summed."""

    def __init__(self, weights: Mapping[str, float], *, components: Iterable[str] | None = None) -> None:
        if not weights:
            raise RewardError("a reward needs at least one weighted component")
        self.weights = {name: _finite("weight", name, w) for name, w in weights.items()}
        if components is not None:
            known = set(components)
            unknown = sorted(set(self.weights) - known)
            if unknown:
                raise RewardError(f"weights name unknown components {unknown}; the verifier produces {sorted(known)}")

    @classmethod
    def for_verifier(cls, verifier: object, weights: Mapping[str, float]) -> RewardComposer:
        """A composer whose weight names are checked against `verifier.components` now."""
        return cls(weights, components=getattr(verifier, "components"))

    def compose(self, result: VerifierResult | Mapping[str, float]) -> ComposedReward:
        components = result.components if isinstance(result, VerifierResult) else dict(result)
        raw = result.raw if isinstance(result, VerifierResult) else {}
        clean = {name: _finite("component", name, v) for name, v in components.items()}
        missing = sorted(set(self.weights) - set(clean))
        if missing:
            raise RewardError(f"components {missing} have weights but the verifier did not produce them")
        reward = math.fsum(self.weights[n] * clean[n] for n in self.weights)
        if not math.isfinite(reward):
            raise RewardError(f"the weighted sum overflowed ({reward!r}); components {clean}, weights {self.weights}")
        return ComposedReward(reward, clean, dict(self.weights), dict(raw))
