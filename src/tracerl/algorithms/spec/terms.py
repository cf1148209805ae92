"""The parts an algorithm is assembled from: typed settings, each with the pure function it calls.

An `Algorithm` (see `base.py`) holds one of each: the surrogate variant, the KL term, the entropy
term, the importance correction, the reward-shaping rules and the batch selection. Each part is a
pydantic model with a docstring per field, validated when the recipe loads; the functions doing
the arithmetic live in `tracerl.algorithms` and are looked up by their registry names.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class ClipCov(Part):
    """Clip-Cov (Cui et al. 2025, The Entropy Mechanism of RL for Reasoning LMs): detach the gradient of
    a random `ratio` fraction of the tokens whose centred log-prob × advantage lies in [cov_low, cov_high]."""

    ratio: float = Field(2e-4, gt=0, le=1)
    """Fraction of tokens (of all selected tokens) whose gradient is detached."""
    cov_low: float = 1.0
    """Lower bound of the covariance band the detached tokens are drawn from."""
    cov_high: float = 5.0
    """Upper bound of that band."""


class KLCov(Part):
    """KL-Cov (same paper): add coef·|log π − log π_old| on the top-`k` fraction of tokens by covariance."""

    k: float = Field(2e-3, gt=0, le=1)
    """Fraction of tokens (largest covariance) that get the penalty."""
    coef: float = Field(1.0, ge=0)
    """Penalty coefficient β."""


class Decoupled(Part):
    """Decoupled PPO (AReaL, Fu et al. 2025): the ratio is clipped around the proximal policy (the
    learner's own log-probs at the start of the update) and multiplied by π_prox/π_behavior."""

    behavior_cap: float | None = Field(None, gt=0)
    """Cap on the behavior weight π_prox/π_behavior (AReaL's code offers one; the paper's equation has none)."""


class KL(Part):
    """A KL penalty to the reference policy (the policy at the start of RL or of the stage)."""

    coef: float = Field(0.0, ge=0)
    """Coefficient; 0 disables the term (and the reference model is not kept)."""
    estimator: Literal["k1", "k2", "k3"] = "k3"
    """Per-token estimator of KL(π_θ‖π_ref) (Schulman 2020): k1 = log r, k2 = ½(log r)², k3 = r − 1 − log r."""


class Magic(Part):
    """MAGIC adaptive entropy control (Skywork-OR1): c += Δ while rollout entropy < target, −= above;
    the bonus coefficient is c while entropy ≤ target, else 0."""

    target: float = Field(0.2, ge=0)
    """Target entropy H* in nats (the report uses 0.2)."""
    delta: float = Field(0.005, gt=0)
    """Step Δ of the coefficient per RL step."""
    init: float = 0.0
    """Initial coefficient c₀."""
    floor: float | None = None
    """Lower clamp of c (the report has none; 0.0 keeps the bonus from turning into a penalty)."""


class Entropy(Part):
    """An entropy bonus −α·H over the trained tokens: α constant, or set each step by MAGIC."""

    coef: float = Field(0.0, ge=0)
    """Constant coefficient α (ignored when `magic` is set); 0 disables the term."""
    magic: Magic | None = None
    """Adaptive control of α; null keeps `coef` constant."""

    @property
    def active(self) -> bool:
        return self.magic is not None or self.coef > 0


class TIS(Part):
    """Truncated importance sampling (Yao et al. 2025): weight min(π_train/π_rollout, cap) per token."""

    kind: Literal["tis"] = "tis"
    cap: float = Field(2.0, gt=0)
    """Truncation cap C of the weight."""


class MIS(Part):
    """Masked importance sampling (Nemotron 3): drop tokens whose π_train/π_rollout leaves [low, high]."""

    kind: Literal["mis"] = "mis"
    low: float = Field(0.5, gt=0, le=1)
    """Lower bound of the kept ratio band."""
    high: float = Field(2.0, ge=1)
    """Upper bound of the kept ratio band."""


class Overlong(Part):
    """DAPO soft overlong punishment: 0 up to L_max − L_cache tokens, then linear to −1 at L_max."""

    cache_len: int = Field(32, ge=1)
    """L_cache; L_max is the episode budget `env.max_tokens` (prompt included)."""
    coef: float = Field(1.0, ge=0)
    """Weight of the penalty added to the reward."""


class LengthControl(Part):
    """Nemotron group-relative length control: centred bonuses for shorter reasoning and answer.
    'Reasoning' is every policy turn but the last (tool use included); the 'answer' is the last turn."""

    lam_think: float = Field(0.5, ge=0)
    """Weight of the centred shortness bonus of the turns before the last."""
    lam_answer: float = Field(0.5, ge=0)
    """Weight of the centred shortness bonus of the last turn."""
    only_correct: bool = True
    """Apply the bonus only in groups where some response is correct (reward > 0), as the report gates it."""


class RoC(Part):
    """rStar2-Agent's resample-on-correct: roll out `oversample`·G per task, keep G — negatives uniformly
    (at most half), positives with the fewest tool errors and format problems most likely."""

    oversample: int = Field(2, ge=2)
    """Rollouts per task as a multiple of the group size (the paper uses 2)."""
    smoothing: float = Field(0.1, gt=0)
    """Added to each positive's penalty before inverting it into a sampling weight."""


class NLL(Part):
    """Positive-example NLL (VAPO, Seed1.5-Thinking): μ times the token-mean NLL of responses whose
    reward exceeds `threshold`."""

    coef: float = Field(0.1, gt=0)
    """μ."""
    threshold: float = 0.0
    """Responses with reward above this count as positive."""
