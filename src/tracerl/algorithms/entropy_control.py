"""MAGIC adaptive entropy controller (Skywork-OR1) and the entropy bonus it scales.

Source: He et al. 2025, Skywork Open Reasoner 1 technical report (MAGIC):

    c_0 = 0,   c_{k+1} = c_k + Δ if H_k < H*,   c_k − Δ if H_k > H*,   α_k = c_k · 1{H_k ≤ H*}

with H* = 0.2 and Δ = 0.005 in the report. The report puts no clip in this equation, so by default c
may go negative after a long stretch above target; `floor` (e.g. 0.0) clamps it, a departure a recipe
must choose explicitly. The controller state is part of a checkpoint (`state_dict`/`load_state_dict`).
"""

from __future__ import annotations

import torch

from tracerl.algorithms.losses.aggregate import aggregate
from tracerl.algorithms.registry import register


@register("magic_entropy", kind="controller",
          description="MAGIC adaptive entropy coefficient: c += delta below target entropy, -= above; active only below",
          source="He et al. 2025 (Skywork-OR1, MAGIC)")
class MagicEntropyController:
    def __init__(self, target: float = 0.2, delta: float = 0.005, init: float = 0.0, floor: float | None = None) -> None:
        if delta <= 0:
            raise ValueError(f"delta must be positive, got {delta}")
        self.target, self.delta, self.floor = float(target), float(delta), floor
        self.coef = float(init)
        self.steps = 0

    def step(self, entropy: float) -> float:
        """Given rollout entropy H_k, return α_k for this update and advance c_k → c_{k+1}."""
        entropy = float(entropy)
        alpha = self.coef if entropy <= self.target else 0.0
        if entropy < self.target:
            self.coef += self.delta
        elif entropy > self.target:
            self.coef -= self.delta
        if self.floor is not None:
            self.coef = max(self.coef, self.floor)
        self.steps += 1
        return alpha

    def state_dict(self) -> dict[str, float | int | None]:
        return {"target": self.target, "delta": self.delta, "floor": self.floor, "coef": self.coef, "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.target, self.delta, self.floor = float(state["target"]), float(state["delta"]), state["floor"]
        self.coef, self.steps = float(state["coef"]), int(state["steps"])


@register("entropy_bonus", kind="loss",
          description="entropy regulariser -alpha * aggregate(entropy); alpha from a controller or constant",
          source="Williams & Peng 1991 (entropy regularisation); Skywork-OR1 (MAGIC)")
def entropy_bonus(
    entropy_BT: torch.Tensor, mask_BT: torch.Tensor, *, coef: float, aggregation: str = "token", max_len: int | None = None
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss to minimise (−coef · aggregated entropy) and stats."""
    agg = aggregate(entropy_BT, mask_BT, aggregation, max_len)
    loss = -coef * agg
    return loss, {"entropy": agg.detach(), "entropy_coef": torch.tensor(float(coef)), "entropy_loss": loss.detach()}
