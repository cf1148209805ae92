"""tracerl vs TRL's `GRPOTrainer` on the same task, model, batch and budgets, interleaved A/B.

    .venv/bin/pip install --no-deps trl && .venv/bin/pip install accelerate datasets pandas psutil
    .venv/bin/python benchmarks/vs_trl.py --model RUN/checkpoints/step_0 [--steps 4] [--reps 3] [--json]

TRL is a benchmark-only dependency (never a runtime one); `--no-deps` keeps the pinned torch.

Both sides start from the same post-SFT math_tool checkpoint (tokenizer included) and train GRPO
on math_tool's train split: 8 prompts x 8 samples per step, the default recipe's budgets (3 turns,
192 tokens, 40 new tokens per turn), temperature 1, one optimizer step per batch, lr 5e-4,
clip 0.2/0.28, token-level loss, no KL, one torch thread. The episodes are played by this
project's agent loop in both (same env, sandbox, verifier and budgets), because TRL has no
multi-turn tool environment of this shape: TRL gets it through `rollout_func`, generating with
Hugging Face `generate` on the trainer's model (TRL's own CPU generation backend), and trains
every row, observation tokens masked through `env_mask`. Arms:

- `tracerl`: `tracerl train default` as shipped (rows with zero advantage skip the learner);
- `tracerl_all`: the same with a 1e-9 entropy term, which makes every row go through the learner
  (what TRL does), so the step-time ratio compares equal work;
- `tracerl_all_plain`: `tracerl_all` with `learner.share_prefix=false`, the learner running every
  row's whole sequence (what it did before it scored each group's prompt once);
- `trl`: `GRPOTrainer` as above.

Each arm runs in its own process; the order rotates every repetition. Reported per arm: median
step wall time over steps 2..N (step 1 warms up), mean reward, and reward per wall second
(mean episode reward x episodes per step / step seconds). Measured on a shared machine: read the
ratios, not the absolute seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARMS = ("tracerl", "tracerl_all", "tracerl_all_plain", "trl")
BUDGETS = {"max_turns": 3, "max_tokens": 192, "max_new_tokens": 40}


def run_tracerl(model: str, steps: int, seed: int, every_row: bool, prompts: int, group: int,
                share_prefix: bool = True) -> dict:
    with tempfile.TemporaryDirectory(prefix="vs-trl-") as d:
        cmd = [sys.executable, "-m", "tracerl.cli", "train", "default", f"model.path={model}", "stages=[rl]",
               f"rl.steps={steps}", f"rl.prompts_per_step={prompts}", f"rl.group_size={group}", "rl.minibatches=1",
               "rl.eval_every=0", "rl.checkpoint_every=0", "run.threads=1", "run.progress=false", f"run.seed={seed}",
               f"run.dir={d}/run"]
        if every_row:
            cmd.append("rl.algorithm.entropy.coef=1e-9")
        if not share_prefix:
            cmd.append("learner.share_prefix=false")
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if out.returncode != 0:
            raise RuntimeError(f"tracerl train failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
        step_s = [float(m.group(1)) for m in re.finditer(r"^rl step .*\| ([0-9.]+)s$", out.stdout, re.M)]
        rl = [json.loads(line) for line in open(f"{d}/run/metrics.jsonl") if '"stage": "rl"' in line]
        rewards = [m["reward/mean"] for m in rl if m.get("reward/mean") is not None]
        learner_s = [m["time/learner_s"] for m in rl if m.get("time/learner_s") is not None]
    return {"step_s": step_s, "reward": rewards, "learner_s": learner_s}


def run_trl(model_dir: str, steps: int, seed: int, prompts: int, group: int) -> dict:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from tracerl.envs import get_env
    from tracerl.models import load_model_and_tokenizer
    from tracerl.rollout import LoopBudgets, run_episodes

    sys.path.insert(0, str(Path(__file__).parent))
    from _trl_common import env_reward, step_timer, trl_rollout_batch
    from rollout import HFGenerateEngine

    torch.set_num_threads(1)
    model, tok = load_model_and_tokenizer(model_dir)
    spec = get_env("math_tool")
    tasks = {t.id: t for t in spec.generate("train", 3000, seed)}
    budgets = LoopBudgets(**BUDGETS)
    gen = torch.Generator().manual_seed(seed)
    calls = {"n": 0}

    def rollout_func(prompts_in, trainer):
        calls["n"] += 1
        batch = [tasks[p] for p in prompts_in]
        groups = [f"g{i // group}" for i in range(len(batch))]
        trajs = run_episodes(HFGenerateEngine(trainer.model, tok), spec, batch, groups, budgets=budgets,
                             sampling={"temperature": 1.0, "top_p": 1.0, "top_k": 0}, policy_version=calls["n"],
                             seed=seed * 1000 + calls["n"], generator=gen)
        return trl_rollout_batch(trajs)

    timer = step_timer()
    ids = list(tasks)[: prompts * steps * 2]
    with tempfile.TemporaryDirectory(prefix="vs-trl-") as d:
        cfg = GRPOConfig(output_dir=d, per_device_train_batch_size=prompts * group, num_generations=group,
                         gradient_accumulation_steps=1, learning_rate=5e-4, lr_scheduler_type="constant",
                         beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type="dapo", num_iterations=1,
                         max_completion_length=BUDGETS["max_tokens"], temperature=1.0, top_p=1.0, top_k=0,
                         max_steps=steps, logging_steps=1, save_strategy="no", report_to="none", use_cpu=True,
                         seed=seed, bf16=False, fp16=False, dataloader_num_workers=0, max_grad_norm=1.0,
                         disable_tqdm=True)
        trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=[env_reward], args=cfg,
                              train_dataset=Dataset.from_dict({"prompt": ids}), rollout_func=rollout_func,
                              callbacks=[timer])
        trainer.train()
        rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    return {"step_s": timer.step_s, "reward": rewards}


def summarise(runs: dict[str, list[dict]], episodes: int) -> dict:
    out = {}
    for arm, reps in runs.items():
        step = statistics.median(s for r in reps for s in r["step_s"][1:] or r["step_s"])
        reward = statistics.mean(x for r in reps for x in r["reward"])
        out[arm] = {"step_s": step, "reward": reward, "reward_per_s": reward * episodes / step}
        if reps[0].get("learner_s"):
            out[arm]["learner_s"] = statistics.median(s for r in reps for s in r["learner_s"][1:] or r["learner_s"])
    for arm in out:
        if arm != "trl" and "trl" in out:
            out[arm]["trl_step_over_this"] = out["trl"]["step_s"] / out[arm]["step_s"]
            out[arm]["reward_per_s_over_trl"] = (out[arm]["reward_per_s"] / out["trl"]["reward_per_s"]
                                                 if out["trl"]["reward_per_s"] else float("nan"))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="a post-SFT math_tool checkpoint (HF model dir)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--arm", help=argparse.SUPPRESS)  # one arm, in this process (used by the driver)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.arm:
        if args.arm == "trl":
            res = run_trl(args.model, args.steps, args.seed, args.prompts, args.group)
        else:
            res = run_tracerl(args.model, args.steps, args.seed, args.arm.startswith("tracerl_all"), args.prompts,
                              args.group, share_prefix=args.arm != "tracerl_all_plain")
        print("RESULT " + json.dumps(res))
        return 0
    arms = args.arms.split(",")
    runs: dict[str, list[dict]] = {a: [] for a in arms}
    for rep in range(args.reps):
        for arm in arms[rep % len(arms):] + arms[:rep % len(arms)]:
            cmd = [sys.executable, __file__, "--arm", arm, "--model", args.model, "--steps", str(args.steps),
                   "--seed", str(args.seed + rep), "--prompts", str(args.prompts), "--group", str(args.group)]
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
            line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                raise RuntimeError(f"arm {arm} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
            runs[arm].append(json.loads(line[7:]))
            if not args.json:
                print(f"rep {rep} {arm:17s} steps {['%.2f' % s for s in runs[arm][-1]['step_s']]} "
                      f"reward {['%.3f' % r for r in runs[arm][-1]['reward']]}", flush=True)
    summary = summarise(runs, args.prompts * args.group)
    if args.json:
        print(json.dumps({"summary": summary, "runs": runs}, indent=2))
    else:
        for arm, s in summary.items():
            extra = (f"  TRL step / this {s['trl_step_over_this']:.2f}x, reward/s vs TRL "
                     f"{s['reward_per_s_over_trl']:.2f}x") if "trl_step_over_this" in s else ""
            learner = f" (learner {s['learner_s']:.2f}s)" if "learner_s" in s else ""
            print(f"{arm:17s} step {s['step_s']:.2f}s{learner}  reward {s['reward']:.3f}  "
                  f"reward/s {s['reward_per_s']:.2f}{extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
