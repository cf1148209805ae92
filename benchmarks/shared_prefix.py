"""The learner's shared-prefix scoring (train/shared_prefix.py) against the plain forward, side by side.

    .venv/bin/python benchmarks/shared_prefix.py [--model CKPT] [--env math_tool] [--prompts 8] [--group 8] [--reps 5]

Two workloads, each timed as forward + backward (+ an optimizer step for SFT), `learner.share_prefix`
on and off alternating in one process, one torch thread:

- RL: one GRPO batch of `prompts` × `group` real rollouts of `--env` by the model (the agent loop,
  the recipe's budgets), every row scored and back-propagated (`score_actions`);
- SFT: `--sft-batch` expert demonstrations of `--env` per step (`sft_loss`), as `tracerl train` runs them.

`--model` is a checkpoint (post-SFT rollouts have realistic lengths); without it the default
recipe's tiny model is built from the env's demonstrations (random weights: its rollouts run to
the token budget). Reported: median seconds per step of each arm, the ratio, and the tokens the
decoder ran in each (rows × columns vs what the split runs).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from tracerl.algorithms.batch import collate
from tracerl.config import load_recipe
from tracerl.envs import get_env
from tracerl.models import load_model_and_tokenizer
from tracerl.models.tiny import build_tiny
from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes
from tracerl.train.batch import action_mask, pad_batch
from tracerl.train.demos import collect_demos, demo_texts, tokenize_demo
from tracerl.train.optim import make_optimizer
from tracerl.train.roles import score_actions
from tracerl.train.sft import sft_loss
from tracerl.train.shared_prefix import split_levels


def decoder_tokens(ids: torch.Tensor, attn: torch.Tensor, action: torch.Tensor) -> tuple[int, int]:
    """(tokens the plain forward runs, tokens the split runs)."""
    B, T = ids.shape
    levels, run, start = split_levels(ids, attn, action), 0, 0
    for end in levels:
        run += torch.unique(ids[:, :end], dim=0).shape[0] * (end - start)
        start = end
    return B * T, run + B * (T - start)


def timed(fn, reps: int) -> dict[bool, list[float]]:
    out: dict[bool, list[float]] = {True: [], False: []}
    for share in (True, False):  # warm-up
        fn(share)
    for _ in range(reps):
        for share in (True, False):
            t = time.perf_counter()
            fn(share)
            out[share].append(time.perf_counter() - t)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="a checkpoint (HF dir); default: build the default recipe's tiny model")
    ap.add_argument("--env", default="math_tool")
    ap.add_argument("--recipe", default="default", help="recipe whose budgets and tiny-model sizes are used")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--sft-batch", type=int, default=32)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    recipe = load_recipe(args.recipe, [f"env.name={args.env}"])
    spec = get_env(args.env)
    demos = collect_demos(spec, spec.generate("train", max(args.sft_batch, 64), 0), seed=0,
                          max_turns=recipe.env.max_turns, expert_kwargs={"tool_rate": recipe.sft.expert_tool_rate})
    tmp = tempfile.TemporaryDirectory(prefix="shared-prefix-")
    path = args.model
    if path is None:
        t = recipe.model.tiny
        path = build_tiny(Path(tmp.name) / "m", demo_texts(demos), tags=spec.special_tokens, vocab_size=t.vocab_size,
                          hidden_size=t.hidden_size, num_layers=t.num_layers, num_heads=t.num_heads,
                          intermediate_size=t.intermediate_size, max_positions=t.max_positions, seed=0)
    model, tok = load_model_and_tokenizer(path)
    tasks = spec.generate("train", args.prompts, 1)
    trajs = run_episodes(TorchEngine(model, tok), spec, [t for t in tasks for _ in range(args.group)],
                         [f"g{i}" for i in range(args.prompts) for _ in range(args.group)],
                         budgets=LoopBudgets.from_env(recipe.env), sampling=recipe.sampling.model_dump(),
                         policy_version=0, seed=0, generator=torch.Generator().manual_seed(0))
    batch = collate(trajs, pad_id=tok.pad_token_id)
    examples = [tokenize_demo(tok, d) for d in demos[:args.sft_batch]]
    ids, attn = pad_batch([e[0] for e in examples], tok.pad_token_id)
    mask = action_mask([e[1] for e in examples], ids.shape[1])
    opt = make_optimizer(model, 1e-9)
    model.train()

    def rl(share: bool) -> None:
        model.zero_grad(set_to_none=True)
        out = score_actions(model, batch, temperature=1.0, share_prefix=share)
        (-(out.logprobs_BT * batch.mask_BT).sum() - 1e-9 * out.entropy_BT.sum()).backward()

    def sft(share: bool) -> None:
        opt.zero_grad(set_to_none=True)
        sft_loss(model, ids, attn, mask, share_prefix=share).backward()
        opt.step()

    print(f"{args.env}, model {path if args.model else 'tiny (random init)'}, one thread, {args.reps} reps, alternating")
    for name, fn, shape in (("RL learner", rl, (batch.ids_BT, batch.attn_BT, batch.action_BT)),
                            ("SFT step", sft, (ids, attn, mask))):
        t = timed(fn, args.reps)
        plain_tok, split_tok = decoder_tokens(*shape)
        on, off = statistics.median(t[True]), statistics.median(t[False])
        print(f"{name:10s} {shape[0].shape[0]:3d} rows x {shape[0].shape[1]:3d} cols  plain {off:6.3f} s  shared {on:6.3f} s"
              f"  plain/shared {off / on:4.2f}x  decoder tokens {plain_tok} -> {split_tok} ({plain_tok / split_tok:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
