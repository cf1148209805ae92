"""One row per environment: held-out success after SFT and after RL on the shipped recipe.

    .venv/bin/python benchmarks/envs.py                      # every suite env, full shipped recipes
    .venv/bin/python benchmarks/envs.py --small search_qa    # reduced sizes (a few minutes each)
    .venv/bin/python benchmarks/envs.py --from-runs runs/bench-envs/*   # table of finished runs
    .venv/bin/python benchmarks/envs.py --set run.threads=1 text_world  # extra recipe overrides
    .venv/bin/python benchmarks/envs.py --seeds 0 1 search_qa   # one run per seed

Each environment runs its shipped recipe (`src/tracerl/recipes/<env>.yaml`; math_tool's is the
default recipe; stages sft → eval → rl → eval) under the same frozen evaluation protocol before and
after RL. Columns: held-out success (avg@n) after SFT and after RL, tool calls per episode and
invalid-action rate (per policy turn) of the final evaluation, and the run's wall time. Runs land in
runs/bench-envs/<env> (<env>-s<seed> with --seeds). Below the table, per env: at how many seeds RL
beat SFT and the mean gain.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

SUITE = ("math_tool", "search_qa", "code_tests", "text_world", "workplace_db", "reasoning_gym")
RECIPE = {"math_tool": "default"}  # the env's shipped recipe, where it is not named after the env
SMALL = ["env.train_tasks=800", "env.heldout_tasks=50", "sft.demos=600", "sft.epochs=3", "rl.steps=12",
         "rl.prompts_per_step=8", "rl.group_size=8", "rl.eval_every=0", "rl.checkpoint_every=100",
         "eval.tasks=50", "eval.samples=2", "eval.k=[1,2]"]


def invalid_rate(run_dir: Path, step: int) -> float:
    """Invalid-action observations per policy turn in the evaluation stored at `step`."""
    import sqlite3

    from tracerl.store import Store

    db = sqlite3.connect(run_dir / "store.sqlite")
    ids = [r[0] for r in db.execute("SELECT trajectory_id FROM trajectories WHERE stage LIKE 'eval%' AND step=?", (step,))]
    db.close()
    invalid = turns = 0
    with Store(run_dir / "store.sqlite") as store:
        for tid in ids:
            for t in store.trajectories(trajectory_id=tid):
                turns += sum(1 for s in t.spans if s.kind == "action")
                invalid += sum(1 for s in t.spans if s.kind == "observation" and s.tool_status == "invalid_action")
    return invalid / max(turns, 1)


def row_of(run_dir: Path) -> dict:
    """The table row of a finished run, from its summary.json, config.yaml and store."""
    import json

    import yaml

    summary = json.loads((run_dir / "summary.json").read_text())
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    evals = summary["evals"]
    sft = next(e for e in evals if e["after"] == "sft")
    rl = next(e for e in evals if e["after"] == "rl")
    return {"env": config["env"]["name"], "seed": config["run"]["seed"], "sft": sft["eval/success"], "rl": rl["eval/success"],
            "tool_calls": rl["eval/tool_calls_per_episode"], "invalid_rate": invalid_rate(run_dir, rl["step"]),
            "wall_s": summary["wall_s"]}


def run_env(name: str, seed: int | None, overrides: list[str], root: Path) -> dict:
    from tracerl.config import load_recipe
    from tracerl.run.pipeline import run_recipe

    where = root / (name if seed is None else f"{name}-s{seed}")
    seeded = [] if seed is None else [f"run.seed={seed}"]
    recipe = load_recipe(RECIPE.get(name, name), [f"run.dir={where}", "run.progress=false", *seeded, *overrides])
    return row_of(run_recipe(recipe).run_dir)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("envs", nargs="*", default=list(SUITE))
    p.add_argument("--small", action="store_true", help="reduced sizes: " + " ".join(SMALL))
    p.add_argument("--root", default="runs/bench-envs")
    p.add_argument("--seeds", nargs="+", type=int, help="run each env at these seeds (default: the recipe's)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra recipe override, e.g. run.threads=1 (repeatable; wall time is then measured with it)")
    p.add_argument("--from-runs", nargs="+", metavar="RUN_DIR", help="tabulate finished runs instead of running")
    args = p.parse_args(argv)
    if args.from_runs:
        rows = [row_of(Path(d)) for d in args.from_runs]
    else:
        rows = [run_env(n, seed, (SMALL if args.small else []) + args.set, Path(args.root))
                for n in args.envs for seed in (args.seeds or [None])]
    head = f"{'env':<14} {'seed':>4} {'SFT success':>11} {'RL success':>10} {'RL > SFT':>8} {'tool calls':>10} {'invalid':>8} {'wall':>7}"
    print("\n" + head + "\n" + "-" * len(head))
    for r in rows:
        print(f"{r['env']:<14} {r['seed']:>4} {r['sft']:>11.3f} {r['rl']:>10.3f} {'yes' if r['rl'] > r['sft'] else 'no':>8} "
              f"{r['tool_calls']:>10.2f} {r['invalid_rate']:>8.3f} {r['wall_s'] / 60:>6.1f}m")
    print("\n" + "\n".join(summary_lines(rows)))
    return 0


def summary_lines(rows: list[dict]) -> list[str]:
    """Per env: at how many seeds RL beat SFT and the mean gain; then how many envs won at every seed."""
    envs = list(dict.fromkeys(r["env"] for r in rows))
    lines = []
    for env in envs:
        mine = [r for r in rows if r["env"] == env]
        gain = sum(r["rl"] - r["sft"] for r in mine) / len(mine)
        lines.append(f"{env:<14} RL > SFT in {sum(r['rl'] > r['sft'] for r in mine)} of {len(mine)} seeds, "
                     f"mean gain {gain:+.3f}")
    robust = sum(all(r["rl"] > r["sft"] for r in rows if r["env"] == env) for env in envs)
    return lines + ["", f"RL beats SFT on held-out success at every seed run in {robust} of {len(envs)} environments"]


if __name__ == "__main__":
    sys.exit(main())
