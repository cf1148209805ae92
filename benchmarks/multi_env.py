"""Level 6: one run over several domains — mixture vs domain cascade vs single-domain RL, at equal
per-domain RL steps.

    .venv/bin/python benchmarks/multi_env.py                          # 3 seeds, the default contenders
    .venv/bin/python benchmarks/multi_env.py --seeds 0 --steps 4 --preset small
    .venv/bin/python benchmarks/multi_env.py --from-runs runs/bench-multi-env   # table of finished runs

One SFT start over the `multi_env` recipe's three environments (math_tool, code_tests, search_qa;
demonstrations split equally) is trained first into <root>/sft. Every contender starts from it
(`model.path`), runs stages eval → rl → eval, and gives each domain the same RL budget: S steps of P
tasks × G rollouts.
  * mixture:   3·S steps, every batch a third of each domain (envs shares 1:1:1);
  * mixture-joint: S steps of 3·P tasks — each step is every domain's P-task batch, one update over all;
  * mixture-joint-episodes: the joint schedule with `mixture.loss_share: episodes`;
  * mixture-episodes: the mixture with `mixture.loss_share: episodes` (each domain's share of the loss is its
    share of the episodes, not of the action tokens);
  * mixture-alternate: the mixture with `mixture.schedule: alternate` (every batch one domain, in turns);
  * cascade-A-B-C: three RL stages of S steps, one domain each, in that order (optimizer reset at
    each boundary, as Nemotron-Cascade does);
  * only-X:    S steps on domain X alone (the other domains are still evaluated: forgetting shows).
Columns: held-out success per domain after RL (avg@n under each domain's frozen protocol), and
the mean over domains; the last lines give, per contender, the mean over seeds and, for the
mixture, its gap to each single-domain contender on that contender's own domain.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

DOMAINS = ("math_tool", "code_tests", "search_qa")
PRESETS = {
    "default": ["env.train_tasks=1500", "env.heldout_tasks=60", "eval.tasks=40"],
    "small": ["env.train_tasks=300", "env.heldout_tasks=30", "eval.tasks=20", "sft.demos=900", "sft.epochs=4",
              "model.tiny.hidden_size=96", "model.tiny.intermediate_size=288"],
    # a start every domain can learn from: 1000 demonstrations per domain (the recipe's 400 left math_tool at
    # 0.04 and search_qa at 0.08, so most groups had no signal), 60 held-out tasks per domain
    "learn": ["env.train_tasks=1500", "env.heldout_tasks=60", "eval.tasks=60", "sft.demos=3000", "sft.epochs=6"],
}
COMMON = ["run.threads=1", "run.progress=false", "rl.eval_every=0", "rl.checkpoint_every=1000", "mixture={}",
          *(f"envs.{i}.share=1" for i in range(len(DOMAINS)))]
CASCADES = (("math_tool", "code_tests", "search_qa"), ("search_qa", "code_tests", "math_tool"))


def contenders(steps: int, prompts: int = 12, cascades=CASCADES) -> dict[str, list[str]]:
    out = {"mixture": [f"rl.steps={3 * steps}"],
           # S steps of 3·P tasks: every step holds each domain's whole P-task batch, one update over all three
           "mixture-joint": [f"rl.steps={steps}", f"rl.prompts_per_step={3 * prompts}"],
           # the same, each domain a third of the loss (under token aggregation search_qa's short episodes hold
           # under a tenth of the action tokens)
           "mixture-joint-episodes": [f"rl.steps={steps}", f"rl.prompts_per_step={3 * prompts}",
                                      "mixture.loss_share=episodes"],
           # each domain's share of the loss = its share of the episodes, not of the tokens (code's are long)
           "mixture-episodes": [f"rl.steps={3 * steps}", "mixture.loss_share=episodes"],
           # every batch one domain, in turns: each domain's update is normalised over its own tokens
           "mixture-alternate": [f"rl.steps={3 * steps}", "mixture.schedule=alternate"]}
    for order in cascades:
        stages = ", ".join(f"{{name: {d}, steps: {steps}, envs: [{d}], reset_optimizer: {str(i > 0).lower()}}}"
                           for i, d in enumerate(order))
        out["cascade-" + "-".join(d.split("_")[0] for d in order)] = [f"rl.stages=[{stages}]"]
    for d in DOMAINS:
        out[f"only-{d}"] = [f"rl.stages=[{{name: {d}, steps: {steps}, envs: [{d}]}}]"]
    return out


def _train(overrides: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "tracerl.cli", "train", "multi_env", *overrides], check=True)


def _finished(run_dir: Path) -> bool:
    summary = run_dir / "summary.json"
    return summary.exists() and "wall_s" in json.loads(summary.read_text())


def row_of(run_dir: Path) -> dict:
    name, _, seed = run_dir.name.rpartition("-s")
    evals = json.loads((run_dir / "summary.json").read_text())["evals"]
    start, end = evals[0], evals[-1]
    return {"contender": name, "seed": int(seed), **{f"start/{d}": start.get(f"eval/{d}/success", float("nan")) for d in DOMAINS},
            **{d: end.get(f"eval/{d}/success", float("nan")) for d in DOMAINS}}


def table(rows: list[dict]) -> str:
    head = f"{'contender':<26} {'seed':>4} " + " ".join(f"{d:>10}" for d in DOMAINS) + f" {'mean':>7}"
    lines = [head, "-" * len(head)]
    if rows:
        r0 = rows[0]
        lines.append(f"{'SFT start':<26} {'':>4} " + " ".join(f"{r0[f'start/{d}']:>10.3f}" for d in DOMAINS)
                     + f" {sum(r0[f'start/{d}'] for d in DOMAINS) / len(DOMAINS):>7.3f}")
    for r in rows:
        lines.append(f"{r['contender']:<26} {r['seed']:>4} " + " ".join(f"{r[d]:>10.3f}" for d in DOMAINS)
                     + f" {sum(r[d] for d in DOMAINS) / len(DOMAINS):>7.3f}")
    lines.append("")
    means = {}
    for name in dict.fromkeys(r["contender"] for r in rows):
        mine = [r for r in rows if r["contender"] == name]
        means[name] = {d: sum(r[d] for r in mine) / len(mine) for d in DOMAINS}
        lines.append(f"{name:<26} mean over {len(mine)} seeds: " + ", ".join(f"{d} {v:.3f}" for d, v in means[name].items())
                     + f"; all {sum(means[name].values()) / len(DOMAINS):.3f}")
    for mix in (m for m in ("mixture", "mixture-joint", "mixture-joint-episodes", "mixture-episodes",
                                   "mixture-alternate") if m in means):
        for d in DOMAINS:
            if f"only-{d}" in means:
                gap = means[mix][d] - means[f"only-{d}"][d]
                lines.append(f"{mix} vs only-{d} on {d}: {gap:+.3f}{_paired(rows, mix, f'only-{d}', d)}")
    cascades = {n: sum(m.values()) / len(DOMAINS) for n, m in means.items() if n.startswith("cascade-")}
    if cascades:
        best = max(cascades, key=cascades.get)
        lines.append(f"best cascade order: {best} (mean {cascades[best]:.3f}; others "
                     + ", ".join(f"{n} {v:.3f}" for n, v in cascades.items() if n != best) + ")")
    return "\n".join(lines)


def _paired(rows: list[dict], a: str, b: str, domain: str) -> str:
    """Per-seed gaps a − b on `domain` over the seeds both ran, and their standard error."""
    by = {(r["contender"], r["seed"]): r[domain] for r in rows}
    gaps = [by[a, s] - by[b, s] for (name, s) in by if name == a and (b, s) in by]
    if len(gaps) < 2:
        return ""
    mean = sum(gaps) / len(gaps)
    se = (sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1) / len(gaps)) ** 0.5
    return f" (paired over {len(gaps)} seeds: {mean:+.3f} ± {se:.3f} SE; per seed " + " / ".join(f"{g:+.3f}" for g in gaps) + ")"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=8, help="RL steps per domain (S)")
    p.add_argument("--prompts", type=int, default=12, help="tasks per RL step (P)")
    p.add_argument("--group", type=int, default=8, help="rollouts per task (G)")
    p.add_argument("--preset", choices=list(PRESETS), default="default")
    p.add_argument("--only", nargs="+", help="run only these contenders (names as in the table)")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="extra overrides for the SFT start and every contender (e.g. a larger held-out set for one "
                        "domain: envs.0.heldout_tasks=240 envs.0.eval_tasks=240)")
    p.add_argument("--root", default="runs/bench-multi-env")
    p.add_argument("--from-runs", metavar="ROOT", help="tabulate the finished runs under ROOT instead of running")
    args = p.parse_args(argv)
    root = Path(args.from_runs or args.root)
    if not args.from_runs:
        sizes = [*PRESETS[args.preset], *COMMON, f"rl.prompts_per_step={args.prompts}", f"rl.group_size={args.group}", *args.set]
        sft = root / "sft"
        if not (sft / "checkpoints" / "step_0").exists():
            _train([f"run.dir={sft}", *sizes, "stages=[sft]"])
        for seed in args.seeds:
            for name, overrides in contenders(args.steps, args.prompts).items():
                where = root / f"{name}-s{seed}"
                if (args.only and name not in args.only) or _finished(where):
                    continue
                _train([f"run.dir={where}", f"run.seed={seed}", f"model.path={sft}/checkpoints/step_0", *sizes,
                        *overrides, "stages=[eval,rl,eval]"])
    rows = [row_of(d) for d in sorted(root.iterdir()) if d.name != "sft" and _finished(d)]
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
