"""GSPO (Zheng et al. 2025): GRPO's group-normalised advantage with a sequence-level ratio and clip.

The surrogate is `losses.gspo_loss`; every other part (KL, entropy, NLL, shaping, selection) is the shared
`Algorithm` fields. The token-level surrogate variants (Clip-Cov, KL-Cov, decoupled PPO, dual clip) and the
per-token importance corrections (TIS, MIS) weigh or drop single tokens, which a sequence ratio has no
place for: they are refused when the recipe loads.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, model_validator

from tracerl.algorithms.losses.gspo import gspo_loss
from tracerl.algorithms.spec.critic_free import GRPO


class GSPO(GRPO):
    """GSPO: s_i = exp(mean_t log π_θ/π_old) per response, clipped to [1 − ε_low, 1 + ε_high] per response."""

    name: Literal["gspo"] = "gspo"  # type: ignore[assignment]
    clip_low: float = Field(3e-4, ge=0, lt=1)
    """Lower clip of the sequence ratio (GSPO: 3e-4; the ratio is a per-token geometric mean)."""
    clip_high: float = Field(4e-4, ge=0)
    """Upper clip of the sequence ratio (GSPO: 4e-4)."""
    aggregation: Literal["token", "sequence", "fixed"] = "sequence"
    """`sequence`: the paper's mean over responses; `token` weighs each response's term by its action tokens."""
    variant: Literal["sequence", "token"] = "sequence"
    """`sequence`: GSPO; `token`: GSPO-token (sg[s_i]·π_θ(y_t)/sg[π_θ(y_t)] with per-token advantages)."""

    @model_validator(mode="after")
    def _sequence_ratio_only(self) -> GSPO:
        token_level = [n for n in ("clip_cov", "kl_cov", "decoupled", "dual_clip", "correction") if getattr(self, n) is not None]
        if token_level:
            raise ValueError(f"gspo clips one ratio per sequence, so {', '.join(token_level)} (a token-level "
                             "surrogate variant or correction) does not apply; drop it or use name: grpo")
        return self

    def surrogate(self, logprobs_BT: torch.Tensor, old_BT: torch.Tensor, adv_BT: torch.Tensor, mask_BT: torch.Tensor,
                  *, weights_BT: torch.Tensor | None, **kw) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        assert weights_BT is None  # no correction (refused above)
        return gspo_loss(logprobs_BT, old_BT, adv_BT, mask_BT, **kw, variant=self.variant)
