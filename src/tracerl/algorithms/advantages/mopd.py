"""MOPD dense token advantage: stopgrad(log π_teacher − log π_prox) on the student's own tokens.

Source: NVIDIA Nemotron 3 Ultra report (multi-teacher on-policy distillation, async form) and
Nemotron-Cascade 2 (multi-domain on-policy distillation). The advantage is the
per-token negative reverse-KL sample: positive where the teacher likes the student's token more than
the proximal student does. It is then used with the decoupled PPO loss (behaviour correction
π_prox/π_beh, update ratio π_θ/π_prox) or with `losses.mopd_loss`. Zero off the mask.
"""

from __future__ import annotations

import torch

from tracerl.algorithms.registry import register


@register("mopd", kind="advantage",
          description="on-policy distillation advantage stopgrad(log pi_teacher - log pi_prox) per student token",
          source="Nemotron 3 Ultra / Nemotron-Cascade 2 (MOPD)")
def mopd(teacher_logprobs_BT: torch.Tensor, prox_logprobs_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """Detached dense advantage (B, T)."""
    diff = (teacher_logprobs_BT - prox_logprobs_BT).detach()
    return torch.where(mask_BT.bool(), diff, torch.zeros_like(diff))
