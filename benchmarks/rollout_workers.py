"""Rollout throughput with 1 and 2 engine workers (`rollout.workers`), one torch thread each, side by side.

    .venv/bin/python benchmarks/rollout_workers.py [--model DIR] [--prompts 16] [--group 8] [--reps 3] [--json]

Rollouts as the RL loop plays them with `rollout.workers: N` (rollout/parallel.py): a call's groups split
across N spawned worker processes (one torch thread each, `rollout.threads: 1`), each group seeded on its
own, trajectories reassembled in order. Two measures, both printed:

- `split` (a sync step, strong scaling): the same `--prompts` × `--group` rows played by 1 worker and split
  over 2 (each plays half); both sample the same tokens (checked);
- `per-worker` (throughput, weak scaling: what `rl.mode: async` gets from N workers busy at once): each
  worker plays `--prompts` × `--group` rows, so the 2-worker call plays twice the rows; its first half is the
  1-worker call's groups, with the same tokens (checked).

Both pools are started first and kept; repetitions alternate 1, 2, 2, 1, 1, 2, ... Printed: action tokens
per second of wall time per layout (median over repetitions), the ratio 2 / 1 (target ≥ 1.7 on 2 cores),
and the load average before and after (the machine is shared: a ratio measured under load reflects the
share of the 2 cores each layout got). Model: `--model DIR` (e.g. a post-SFT checkpoint: `tracerl train default stages=[sft]
run.dir=DIR` writes DIR/checkpoints/step_0), else a randomly initialised model of the default recipe's
tiny size (its episodes run to their turn and token budgets: the engine's worst case).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import torch


def _tiny(out: str):
    from tracerl.config import load_recipe
    from tracerl.envs import get_env
    from tracerl.models import build_tiny

    t = load_recipe("default").model.tiny
    spec = get_env("math_tool")
    tasks = spec.generate("train", 200, 0)
    import random

    rng = random.Random(0)
    corpus = [x.prompt for x in tasks] + [spec.expert(x, [], rng, tool_rate=1.0) for x in tasks]
    return build_tiny(out, corpus, tags=spec.special_tokens, vocab_size=t.vocab_size, hidden_size=t.hidden_size,
                      num_layers=t.num_layers, num_heads=t.num_heads, intermediate_size=t.intermediate_size,
                      max_positions=512, seed=0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mode", choices=["split", "per-worker"], default="per-worker")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    from tracerl.config import load_recipe
    from tracerl.envs import get_env
    from tracerl.models import load_model_and_tokenizer
    from tracerl.rollout import LoopBudgets
    from tracerl.rollout.group_seeds import GroupSeeds
    from tracerl.rollout.ray_backend import parallel_episodes

    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        model, tok = load_model_and_tokenizer(a.model or _tiny(tmp))
        spec = get_env("math_tool")
        tasks = spec.generate("train", a.prompts * (a.reps + 1), 1)
        pools = {n: parallel_episodes(load_recipe("default", [f"rollout.workers={n}", "rollout.seeding=group"]), model,
                                      tok, {}) for n in (1, 2)}
        budgets = LoopBudgets.from_env(load_recipe("default").env)
        sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
        rates: dict[int, list[float]] = {1: [], 2: []}
        counts: dict[int, list[int]] = {1: [], 2: []}
        try:
            order = [0] + [x for r in range(a.reps) for x in ((1, 2) if r % 2 == 0 else (2, 1))]  # 0: warm-up both
            for k, n in enumerate(order):
                layouts = (1, 2) if n == 0 else (n,)
                rep = (k - 1) // 2 if n else a.reps  # the warm-up plays tasks of its own
                batch = [t for t in tasks[rep * a.prompts:(rep + 1) * a.prompts] for _ in range(a.group)]
                groups = [f"r{rep}-p{i // a.group}" for i in range(len(batch))]
                for m in layouts:
                    if m == 2 and a.mode == "per-worker":  # the second worker's share: other groups of their own
                        batch, groups = batch + batch, groups + [g.replace("r", "x", 1) for g in groups]
                    t0 = time.perf_counter()
                    trajs = pools[m](None, spec, batch, groups, budgets=budgets, sampling=sampling, policy_version=0,
                                     seed=rep, generator=GroupSeeds(rep))
                    wall = time.perf_counter() - t0
                    tokens = sum(t.num_action_tokens for t in trajs)
                    if n:
                        rates[m].append(tokens / wall)
                        counts[m].append(sum(t.num_action_tokens for t in trajs if t.group_id.startswith("r")))
        finally:
            for p in pools.values():
                p.close()
    load1 = os.getloadavg()
    same = counts[1] == counts[2]
    med = {n: statistics.median(v) for n, v in rates.items()}
    out = {"mode": a.mode, "tokens_per_s_1": med[1], "tokens_per_s_2": med[2], "ratio": med[2] / med[1], "reps": a.reps,
           "tokens_per_rep": counts[1], "same_tokens": same, "rows_per_step": a.prompts * a.group,
           "load_before": list(load0), "load_after": list(load1), "cpus": os.cpu_count()}
    if a.json:
        print(json.dumps(out))
    else:
        rows = f"{a.prompts}x{a.group} rows " + ("split over the workers" if a.mode == "split" else "per worker")
        print(f"rollout tokens/s ({a.mode}), {rows}, median of {a.reps} interleaved reps "
              f"({'same' if same else 'DIFFERENT'} tokens in the shared groups: {counts[1]})")
        print(f"  1 worker : {med[1]:8.1f} tok/s   {['%.1f' % r for r in rates[1]]}")
        print(f"  2 workers: {med[2]:8.1f} tok/s   {['%.1f' % r for r in rates[2]]}")
        print(f"  ratio 2/1: {out['ratio']:.2f}  (target >= 1.7)")
        print(f"  load average before {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, after {load1[0]:.2f} {load1[1]:.2f} "
              f"{load1[2]:.2f} on {os.cpu_count()} CPUs")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
