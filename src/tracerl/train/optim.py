"""Optimizer and learning-rate schedule."""

from __future__ import annotations

import math

import torch


def make_optimizer(model, lr: float, weight_decay: float = 0.0, *, kernel: str = "adamw") -> torch.optim.Optimizer:
    """AdamW over the parameters that train: all of them, or only a LoRA adapter's (models/lora.py). `kernel`
    is `learner.optimizer`: "adamw" (torch's default implementation) or "adamw_fused" (torch's fused kernel)."""
    if kernel not in ("adamw", "adamw_fused"):
        raise ValueError(f"unknown optimizer kernel {kernel!r}; use adamw or adamw_fused")
    params = [p for p in model.parameters() if p.requires_grad]
    fused = True if kernel == "adamw_fused" else None
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95), fused=fused)

    def keep_kernel(optimizer):  # a checkpoint's param_groups carry the kernel it was saved with: the recipe's wins
        for group in optimizer.param_groups:
            group["fused"], group["foreach"] = fused, None

    opt.register_load_state_dict_post_hook(keep_kernel)
    return opt


def optimizer_step(optimizer: torch.optim.Optimizer, params, loss: torch.Tensor, max_grad_norm: float) -> float:
    """The one optimizer step of every trained model (the policy, single-process or sharded; the critic, the
    PRM): zero the gradients, back-propagate `loss`, clip the gradient norm of `params` to `max_grad_norm`,
    step. Returns the global gradient norm before clipping: under FSDP2 the gradients are DTensor shards
    and `clip_grad_norm_` returns the norm as a DTensor, which is read back in full."""
    optimizer.zero_grad(set_to_none=True)
    if callable(loss):  # gradient accumulation: it back-propagates each micro-batch (train/minibatch.py)
        loss()
    else:
        loss.backward()
    gnorm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
    optimizer.step()
    # the gradients are not needed until the next backward: free them now, so they are not held through the
    # next rollout and the next forward's activations (one model's worth of memory off the learner's peak)
    optimizer.zero_grad(set_to_none=True)
    return float(gnorm.full_tensor() if hasattr(gnorm, "full_tensor") else gnorm)


def warmup_cosine(optimizer, total_steps: int, warmup: int, *, floor: float = 0.1):
    """Linear warm-up to the peak, then cosine decay to `floor` × peak."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        t = (step - warmup) / max(1, total_steps - warmup)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def warmup_constant(optimizer, warmup: int):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / max(1, warmup)))


def rl_schedule(optimizer, schedule: dict | None):
    """The RL policy's schedule: 3 warm-up steps, then constant (`schedule` None or kind "constant") or cosine
    decay over `schedule["steps"]` to `schedule["min_ratio"]` × the peak (`rl.lr_schedule`, `rl.min_lr_ratio`)."""
    if not schedule or schedule["kind"] == "constant":
        return warmup_constant(optimizer, warmup=3)
    return warmup_cosine(optimizer, schedule["steps"], warmup=3, floor=schedule["min_ratio"])
