"""Supervised cold start: teach the action grammar from expert demonstrations.

The loss is next-token cross-entropy on ACTION tokens only (token-mean over the batch); prompt,
template and observation tokens are context, never targets.
"""

from __future__ import annotations

import random
import time

import torch
from tqdm import tqdm

from tracerl.config import SFTConfig
from tracerl.contract.roles import TokenRole
from tracerl.models.device import model_device
from tracerl.train.batch import action_mask, pad_batch
from tracerl.train.optim import make_optimizer, warmup_cosine
from tracerl.telemetry.progress import bars_on
from tracerl.train.roles import score_tokens


def sft_loss(model, ids_BT: torch.Tensor, attn_BT: torch.Tensor, mask_BT: torch.Tensor, *,
             share_prefix: bool = True) -> torch.Tensor:
    """Mean negative log-likelihood of the masked (ACTION) target tokens (on the model's device, under its
    autocast), scored like the RL learner: only the positions that predict a target go through the output
    layer, and the demonstrations' common prefix (system prompt, template) runs once (`train/shared_prefix.py`)."""
    dev = model_device(model)
    ids_BT, attn_BT, mask_BT = ids_BT.to(dev), attn_BT.to(dev), mask_BT.to(dev)
    logp = score_tokens(model, ids_BT, attn_BT, mask_BT, temperature=1.0, share_prefix=share_prefix).logprobs_BT
    m = mask_BT[:, 1:]
    return -(logp[:, 1:] * m).sum() / m.sum().clamp_min(1)


def train_sft(model, tokenizer, examples: list[tuple[list[int], list[TokenRole]]], cfg: SFTConfig, *,
              seed: int, log, progress: bool = True, share_prefix: bool = True,
              optimizer: str = "adamw") -> dict[str, float]:
    """Train in place. `log(metrics, step)` receives per-step metrics; `share_prefix` and `optimizer` are the
    recipe's `learner.share_prefix` and `learner.optimizer`."""
    rng = random.Random(f"sft:{seed}")
    steps_per_epoch = max(1, len(examples) // cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    opt = make_optimizer(model, cfg.lr, cfg.weight_decay, kernel=optimizer)
    sched = warmup_cosine(opt, total, warmup=max(1, total // 20))
    model.train()
    t0, step, loss_ema = time.time(), 0, None
    bar = tqdm(total=total, desc="sft", disable=not bars_on(progress), leave=False)  # a terminal only
    for _ in range(cfg.epochs):
        order = list(range(len(examples)))
        rng.shuffle(order)
        for b in range(steps_per_epoch):
            batch = [examples[i] for i in order[b * cfg.batch_size:(b + 1) * cfg.batch_size]]
            ids, attn = pad_batch([e[0] for e in batch], tokenizer.pad_token_id)
            mask = action_mask([e[1] for e in batch], ids.shape[1])
            loss = sft_loss(model, ids, attn, mask, share_prefix=share_prefix)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            loss_ema = loss.item() if loss_ema is None else 0.9 * loss_ema + 0.1 * loss.item()
            if step % 10 == 0 or step == total:
                log({"sft/loss": loss.item(), "sft/lr": sched.get_last_lr()[0]}, step)
            bar.set_postfix(loss=f"{loss_ema:.3f}")
            bar.update()
    bar.close()
    model.eval()
    return {"sft/final_loss": loss_ema or 0.0, "sft/steps": step, "sft/wall_s": time.time() - t0}
