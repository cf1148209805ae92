"""Static vs dynamic sampling vs pass-rate curriculum on the default arithmetic environment.

For each seed: one SFT start (the default recipe's model, demonstrations and SFT), shared by the
three methods; then RL from that start until each method has generated the same number of
policy (ACTION) tokens; then the held-out evaluation of the recipe's frozen protocol.

- static:      uniform sampler; every rolled-out group goes to the update.
- dynamic:     uniform sampler + DAPO dynamic sampling: roll out until `prompts_per_step` groups
               have non-zero reward variance (at most `--max-rounds` rounds per step).
- curriculum:  profile `--profile-tasks` training tasks under the SFT policy (those generated tokens
               count against the same budget), then the Gaussian pass-rate curriculum (0.8 → 0.2).

The RL update is the trainer's own (`tracerl.train.rl.rl_update`); only the choice of prompts differs.

    .venv/bin/python benchmarks/task_sampling.py --seeds 0 1 2 --token-budget 60000 [recipe overrides]
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import inspect
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from tracerl.config import load_recipe
from tracerl.envs import get_env
from tracerl.eval.heldout import run_heldout
from tracerl.models import build_tiny, load_model_and_tokenizer, tokenizer_hashes
from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes
from tracerl.tasks import CurriculumConfig, CurriculumSampler, UniformSampler, dynamic_sample, profile
from tracerl.tasks.attempts import engine_attempt_fn
from tracerl.train.demos import collect_demos, demo_texts, tokenize_demo
from tracerl.train.optim import make_optimizer, warmup_constant
from tracerl.train.rl import advantage_fn, loss_weights, rl_update
from tracerl.train.sft import train_sft

METHODS = ("static", "dynamic", "curriculum")


def env_code_snapshot(recipe) -> str:
    """Source of the env's generator and expert as imported; taken once, since the checkout may move."""
    spec = get_env(recipe.env.name)
    return "".join(inspect.getsource(sys.modules[f.__module__]) for f in (spec.generate, spec.expert))


def sft_start(recipe, seed: int, workdir: str, env_code: str):
    """The default pipeline up to the end of SFT (tasks, demonstrations, tiny model, SFT).

    The SFT model is cached under `workdir`, keyed by seed and the recipe's model/SFT settings.
    """
    spec = get_env(recipe.env.name)
    train = spec.generate("train", recipe.env.train_tasks, seed, tuple(recipe.env.train_difficulty))
    heldout = spec.generate("heldout", recipe.env.heldout_tasks, seed, tuple(recipe.env.heldout_difficulty))
    key = hashlib.sha256(json.dumps([recipe.model.model_dump(), recipe.sft.model_dump(), recipe.env.model_dump(),
                                     spec.revision, env_code], sort_keys=True).encode()).hexdigest()[:10]
    done = Path(workdir) / f"seed{seed}-{key}" / "sft"
    if (done / "config.json").exists():
        model, tok = load_model_and_tokenizer(done)
        return spec, train, heldout, model, tok
    demos = collect_demos(spec, train[: recipe.sft.demos], seed=seed, max_turns=recipe.env.max_turns,
                          expert_kwargs={"tool_rate": recipe.sft.expert_tool_rate})
    tiny = recipe.model.tiny
    model_dir = build_tiny(done.parent / "base", demo_texts(demos) + [str(t.prompt) for t in heldout],
                           tags=spec.special_tokens, vocab_size=tiny.vocab_size, hidden_size=tiny.hidden_size,
                           num_layers=tiny.num_layers, num_heads=tiny.num_heads, intermediate_size=tiny.intermediate_size,
                           max_positions=tiny.max_positions, seed=seed)
    torch.manual_seed(seed)
    model, tok = load_model_and_tokenizer(model_dir)
    train_sft(model, tok, [tokenize_demo(tok, d) for d in demos], recipe.sft, seed=seed, log=lambda m, s: None,
              progress=False)
    model.save_pretrained(done, safe_serialization=True)
    tok.save_pretrained(done)
    return spec, train, heldout, model, tok


class Budget:
    def __init__(self, limit: int):
        self.limit, self.used = limit, 0

    def spend(self, trajs) -> None:
        self.used += sum(t.num_action_tokens for t in trajs)

    @property
    def left(self) -> bool:
        return self.used < self.limit


def run_method(method: str, recipe, spec, train, heldout, start_model, tok, *, seed: int, budget_tokens: int,
               max_rounds: int, profile_tasks: int, profile_n: int) -> dict:
    model = copy.deepcopy(start_model)
    engine = TorchEngine(model, tok)
    hashes = tokenizer_hashes(tok)
    cfg = recipe.rl
    budgets = LoopBudgets(recipe.env.max_turns, recipe.env.max_tokens, recipe.env.max_new_tokens)
    sampling = recipe.sampling.model_dump()
    gen = torch.Generator().manual_seed(seed)
    budget = Budget(budget_tokens)
    extra: dict = {}
    if method == "curriculum":
        pool = UniformSampler(train, seed=seed).next_batch(min(profile_tasks, len(train)))
        attempt = engine_attempt_fn(engine, spec, budgets=budgets, sampling=sampling, seed=seed + 1,
                                    tokenizer_hashes=hashes, on_trajectories=budget.spend)
        prof = profile(pool, attempt, profile_n, batch_size=64)
        rates = [prof.pass_rate(t.id) for t in pool if prof.pass_rate(t.id) is not None]
        extra["profile_tokens"] = budget.used
        extra["profile_mean_pass_rate"] = round(sum(rates) / max(len(rates), 1), 4)
        per_step = cfg.prompts_per_step * cfg.group_size * 12  # rough tokens per step, sets the schedule length
        steps = max(1, (budget_tokens - budget.used) // per_step)
        sampler = CurriculumSampler(pool, prof, CurriculumConfig(mean_start=0.8, mean_end=0.2, std=0.15, steps=steps),
                                    seed=seed)
    else:
        sampler = UniformSampler(train, seed=seed)
    adv_fn = advantage_fn(cfg.advantage, cfg.advantage_scale)
    optimizer = make_optimizer(model, cfg.lr)
    sched = warmup_constant(optimizer, warmup=3)
    step, rounds, zero_var = 0, [], 0

    def rollout(tasks):
        batch = [t for t in tasks for _ in range(cfg.group_size)]
        groups = [f"s{step}-{t.id}" for t in batch]
        trajs = run_episodes(engine, spec, batch, groups, budgets=budgets, sampling=sampling, policy_version=step,
                             seed=seed * 100003 + step * 101 + len(rounds), tokenizer_hashes=hashes, generator=gen)
        budget.spend(trajs)
        return [trajs[i * cfg.group_size:(i + 1) * cfg.group_size] for i in range(len(tasks))]

    while budget.left:
        if method == "dynamic":
            # stop drawing as soon as the budget is spent, so no method overshoots it by more than one round
            got = dynamic_sample(lambda k: sampler.next_batch(k) if budget.left else [], rollout,
                                 cfg.prompts_per_step, max_rounds=max_rounds, rewards=lambda g: [t.reward for t in g])
            rounds.append(got.report.rounds)
            trajs = [t for _, g in got.groups for t in g]
        else:
            trajs = [t for g in rollout(sampler.next_batch(cfg.prompts_per_step)) for t in g]
        if not trajs:
            step += 1
            continue
        groups = [t.group_id for t in trajs]
        rewards = torch.tensor([t.reward for t in trajs], dtype=torch.float32)
        weights = loss_weights(trajs, cfg.truncation)
        adv = adv_fn(rewards, groups) * torch.tensor(weights)
        zero_var += sum(1 for g in set(groups) if len({t.reward for t in trajs if t.group_id == g}) == 1)
        stats = rl_update(model, optimizer, trajs, adv, weights, recipe=recipe, pad_id=tok.pad_token_id)
        stats = stats[0] if isinstance(stats, tuple) else stats  # older trainers returned (stats, extras)
        if stats:
            sched.step()
        step += 1
    res = run_heldout(engine, spec, heldout[: recipe.eval.tasks], samples=recipe.eval.samples, ks=recipe.eval.k,
                      budgets=budgets, sampling={"temperature": recipe.eval.temperature, "top_p": recipe.eval.top_p,
                                                 "top_k": 0}, policy_version=step, seed=seed + 7919,
                      tokenizer_hashes=hashes)
    out = {"method": method, "seed": seed, "heldout_success": round(res.success, 4), "rl_steps": step,
           "generated_tokens": budget.used, "zero_variance_groups_trained": zero_var, **extra}
    if rounds:
        out["mean_rounds_per_step"] = round(sum(rounds) / len(rounds), 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--token-budget", type=int, default=60000, help="generated policy tokens per method and seed")
    ap.add_argument("--max-rounds", type=int, default=4)
    ap.add_argument("--profile-tasks", type=int, default=256)
    ap.add_argument("--profile-n", type=int, default=4)
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--workdir", default="/tmp/tracerl_task_sampling")
    ap.add_argument("--shared-start", type=int, default=None, metavar="SEED",
                    help="use the SFT start of this seed for every seed (only RL sampling and order vary)")
    ap.add_argument("--out", default=None, help="also write the rows as JSON")
    ap.add_argument("overrides", nargs="*", help="recipe overrides, e.g. sft.epochs=2 rl.prompts_per_step=8")
    args = ap.parse_args()
    # the code this process imported: taken at start, since the checkout may move while it runs
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    recipe = load_recipe("default", args.overrides)
    env_code = env_code_snapshot(recipe)
    torch.set_num_threads(recipe.run.threads)
    rows = []
    for seed in args.seeds:
        t0 = time.time()
        start_seed = seed if args.shared_start is None else args.shared_start
        spec, train, heldout, model, tok = sft_start(recipe, start_seed, args.workdir, env_code)
        start = run_heldout(TorchEngine(model, tok), spec, heldout[: recipe.eval.tasks], samples=recipe.eval.samples,
                            ks=recipe.eval.k, budgets=LoopBudgets(recipe.env.max_turns, recipe.env.max_tokens,
                                                                 recipe.env.max_new_tokens),
                            sampling={"temperature": recipe.eval.temperature, "top_p": recipe.eval.top_p, "top_k": 0},
                            policy_version=0, seed=seed + 7919)
        rows.append({"method": "sft (start)", "seed": seed, "start_seed": start_seed,
                     "heldout_success": round(start.success, 4)})
        print(json.dumps(rows[-1]), f"[{time.time() - t0:.0f}s]", flush=True)
        for method in args.methods:
            t1 = time.time()
            rows.append(run_method(method, recipe, spec, train, heldout, model, tok, seed=seed,
                                   budget_tokens=args.token_budget, max_rounds=args.max_rounds,
                                   profile_tasks=args.profile_tasks, profile_n=args.profile_n))
            print(json.dumps(rows[-1]), f"[{time.time() - t1:.0f}s]", flush=True)
    print(f"\nheld-out success (avg@{recipe.eval.samples}, {recipe.eval.tasks} tasks) after RL at "
          f"{args.token_budget} generated tokens per run")
    print(f"{'method':<12} " + " ".join(f"{'seed ' + str(s):>8}" for s in args.seeds) + f" {'mean':>8} {'std':>7}")
    for method in ["sft (start)", *args.methods]:
        vals = [r["heldout_success"] for r in rows if r["method"] == method]
        sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
        print(f"{method:<12} " + " ".join(f"{v:>8.3f}" for v in vals) + f" {statistics.mean(vals):>8.3f} {sd:>7.3f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"token_budget": args.token_budget, "overrides": args.overrides, "commit": commit,
                       "args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
