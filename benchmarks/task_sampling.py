"""Static vs dynamic sampling vs pass-rate curriculum on the default arithmetic environment.

Everything runs through the trainer (`tracerl.run.pipeline.run_recipe`); only `tasks.sampler`
differs between methods. For each seed: the default recipe's SFT stage once (`stages=[sft, eval]`),
then, from that checkpoint, one RL run per method that stops once it has generated the same number
of policy (ACTION) tokens (`rl.max_generated_tokens`), then the recipe's frozen held-out evaluation.

- static:      uniform sampler (each task once per epoch, seeded); every group goes to the update.
- dynamic:     uniform sampler + DAPO dynamic sampling: roll out until `prompts_per_step` groups
               have non-zero reward variance (at most `max_rounds` rounds per step).
- curriculum:  profile `--profile-tasks` training tasks under the SFT policy (`--profile-n` attempts
               each; those tokens count against the budget), then the Gaussian pass-rate curriculum
               (mean 0.8 → 0.2 over `--curriculum-steps` steps) over the profiled tasks.

    .venv/bin/python benchmarks/task_sampling.py --seeds 0 1 2 --token-budget 120000 [recipe overrides]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path

METHODS = ("static", "dynamic", "curriculum")


def method_overrides(method: str, args) -> list[str]:
    if method == "static":
        return ["tasks.sampler.kind=uniform"]
    if method == "dynamic":
        return ["tasks.sampler.kind=dynamic", f"tasks.sampler.dynamic.max_rounds={args.max_rounds}"]
    return ["tasks.sampler.kind=curriculum", f"tasks.profile.tasks={args.profile_tasks}",
            f"tasks.profile.attempts={args.profile_n}", f"tasks.sampler.curriculum.steps={args.curriculum_steps}"]


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def rl_metrics(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "tasks/generated_tokens" in r]


def sft_start(seed: int, args) -> tuple[Path, float]:
    """The default recipe's SFT stage for `seed` (cached in the workdir); its checkpoint and held-out success."""
    from tracerl.config import load_recipe
    from tracerl.run.pipeline import run_recipe

    run_dir = Path(args.workdir) / f"seed{seed}" / "sft"
    if not (run_dir / "summary.json").exists() or "wall_s" not in summary(run_dir):
        recipe = load_recipe("default", [f"run.dir={run_dir}", f"run.seed={seed}", "run.progress=false",
                                         f"run.threads={args.threads}", "stages=[sft, eval]", *args.overrides])
        run_recipe(recipe)
    ev = next(e for e in summary(run_dir)["evals"] if e["after"] == "sft")
    return run_dir / "checkpoints" / "step_0", ev["eval/success"]


def run_method(method: str, seed: int, start: Path, args) -> dict:
    from tracerl.config import load_recipe
    from tracerl.run.pipeline import run_recipe

    run_dir = Path(args.workdir) / f"seed{seed}" / method
    recipe = load_recipe("default", [
        f"run.dir={run_dir}", f"run.seed={seed}", "run.progress=false", f"run.threads={args.threads}",
        f"model.path={start}", "stages=[rl, eval]", "rl.steps=1000", f"rl.max_generated_tokens={args.token_budget}",
        "rl.eval_every=0", "rl.checkpoint_every=0", *method_overrides(method, args), *args.overrides])
    t0 = time.time()
    result = run_recipe(recipe)
    ev = next(e for e in result.evals if e["after"] == "rl")
    steps = rl_metrics(run_dir)
    out = {"method": method, "seed": seed, "heldout_success": round(ev["eval/success"], 4),
           "pass@4": round(ev.get("eval/pass@4", float("nan")), 4), "rl_steps": len(steps),
           "generated_tokens": int(steps[-1]["tasks/generated_tokens"]) if steps else 0,
           "zero_variance_groups_trained": int(sum(r["tasks/zero_variance_groups"] for r in steps
                                                   if method != "dynamic")),
           "groups_generated": int(sum(r["tasks/groups_generated"] for r in steps)),
           "wall_s": round(time.time() - t0)}
    if method == "dynamic":
        out["mean_rounds_per_step"] = round(statistics.mean(r["tasks/rounds"] for r in steps), 3)
    if method == "curriculum":
        prof = json.loads((run_dir / "profiles" / "rl.json").read_text())["tasks"]
        rates = [v["pass_rate"] for v in prof.values() if v["pass_rate"] is not None]
        out["profile_mean_pass_rate"] = round(statistics.mean(rates), 4)
        out["profile_tokens"] = int(steps[0]["tasks/generated_tokens"] - steps[0].get("throughput/generated_tokens", 0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--token-budget", type=int, default=120000, help="generated policy tokens per method and seed")
    ap.add_argument("--max-rounds", type=int, default=4)
    ap.add_argument("--profile-tasks", type=int, default=256)
    ap.add_argument("--profile-n", type=int, default=4)
    ap.add_argument("--curriculum-steps", type=int, default=40)
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", default="runs/bench-task-sampling")
    ap.add_argument("--out", default=None, help="also write the rows as JSON")
    ap.add_argument("overrides", nargs="*", help="recipe overrides for every run, e.g. rl.prompts_per_step=8")
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    rows = []
    for seed in args.seeds:
        t0 = time.time()
        start, success = sft_start(seed, args)
        rows.append({"method": "sft (start)", "seed": seed, "heldout_success": round(success, 4)})
        print(json.dumps(rows[-1]), f"[{time.time() - t0:.0f}s]", flush=True)
        for method in args.methods:
            rows.append(run_method(method, seed, start, args))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\nheld-out success (the default recipe's protocol) after RL at {args.token_budget} generated tokens per run")
    print(f"{'method':<12} " + " ".join(f"{'seed ' + str(s):>8}" for s in args.seeds) + f" {'mean':>8} {'std':>7}")
    for method in ["sft (start)", *args.methods]:
        vals = [r["heldout_success"] for r in rows if r["method"] == method]
        sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
        print(f"{method:<12} " + " ".join(f"{v:>8.3f}" for v in vals) + f" {statistics.mean(vals):>8.3f} {sd:>7.3f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"token_budget": args.token_budget, "commit": commit, "args": vars(args), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
