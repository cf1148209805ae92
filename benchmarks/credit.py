"""Level 4: does step-level credit beat terminal-reward broadcast on text_world at equal environment steps?

    .venv/bin/python benchmarks/credit.py                       # 3 seeds × grpo, ppo, prime, gigpo
    .venv/bin/python benchmarks/credit.py --seeds 0 --algos grpo gigpo
    .venv/bin/python benchmarks/credit.py --from-runs runs/bench-credit   # table of finished runs

One SFT start is trained first (the text_world recipe's `sft` stage at the sizes below, into
<root>/sft); every (algorithm, seed) run then starts from it (`model.path`), with stages eval → rl →
eval and the same rollout budget: `rl.steps` × `rl.prompts_per_step` × `rl.group_size` episodes. The
seed changes the RL sampling and task order, not the SFT start. Columns, from each run's store: held-out
success after RL (avg@n), its change from the SFT start, invalid actions per policy turn, the loop
rate (valid actions per turn that lead back to a state the episode had already been in), turns per
episode (all of the final evaluation), the environment steps RL used, and training successes per 1,000 environment
steps and per RL wall minute.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ALGOS = {"grpo": "text_world", "ppo": "ppo", "prime": "prime", "gigpo": "gigpo"}  # algorithm → recipe
SIZES = ["env.train_tasks=800", "env.heldout_tasks=50", "eval.tasks=50", "eval.samples=2", "eval.k=[1,2]",
         "rl.checkpoint_every=100", "rl.eval_every=0", "run.threads=1", "run.progress=false"]
SFT = ["sft.demos=600", "sft.epochs=4", "stages=[sft]"]
RL = ["rl.steps=8", "rl.prompts_per_step=8", "rl.group_size=4", "stages=[eval,rl,eval]"]
EXTRA = {"ppo": ["roles.critic.pretrain_steps=2"]}  # VAPO's value pretraining, scaled to the 8-step budget


def episode_stats(trajs) -> dict[str, float]:
    """Invalid actions per turn; loops per turn (a valid action that leads back to a state the episode was
    already in); turns per episode; successes and environment steps (turns) in all."""
    turns = invalid = repeated = successes = 0
    for t in trajs:
        seen = {t.initial_state_hash}
        for s in t.spans:
            if s.kind == "action":
                turns += 1
            elif s.kind == "observation":
                bad = s.tool_status == "invalid_action"
                invalid += bad
                if s.state_hash is not None:  # an invalid action stays put: counted as invalid, not as a loop
                    repeated += (not bad) and s.state_hash in seen
                    seen.add(s.state_hash)
        successes += t.reward_components.get("success", 0.0) > 0
    n = max(len(trajs), 1)
    return {"invalid_rate": invalid / max(turns, 1), "repeat_rate": repeated / max(turns, 1),
            "turns": turns / n, "successes": float(successes), "env_steps": float(turns), "episodes": float(len(trajs))}


def row_of(run_dir: Path) -> dict:
    """The table row of a finished run."""
    import sqlite3

    import yaml

    from tracerl.store import Store

    summary = json.loads((run_dir / "summary.json").read_text())
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    evals = {e["after"]: e for e in summary["evals"]}
    db = sqlite3.connect(run_dir / "store.sqlite")
    ids = [r[0] for r in db.execute("SELECT trajectory_id FROM trajectories WHERE stage LIKE 'eval%' AND step=?",
                                    (evals["rl"]["step"],))]
    db.close()
    with Store(run_dir / "store.sqlite") as store:
        train = episode_stats(list(store.trajectories(stage="rl")))
        final = [t for tid in ids for t in store.trajectories(trajectory_id=tid)]
    rl = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rl_wall = sum(m.get("time/rollout_s", 0.0) + m.get("time/learner_s", 0.0) for m in rl if m.get("stage") == "rl")
    ev = episode_stats(final)
    return {"algo": config["rl"]["algorithm"]["name"], "seed": config["run"]["seed"],
            "start": evals["base"]["eval/success"], "success": evals["rl"]["eval/success"],
            "invalid_rate": ev["invalid_rate"], "repeat_rate": ev["repeat_rate"], "turns": ev["turns"],
            "env_steps": train["env_steps"], "per_kstep": 1000 * train["successes"] / max(train["env_steps"], 1),
            "per_min": 60 * train["successes"] / max(rl_wall, 1e-9), "wall_s": summary["wall_s"]}


def _finished(run_dir: Path) -> bool:
    summary = run_dir / "summary.json"
    return summary.exists() and "wall_s" in json.loads(summary.read_text())


def _train(recipe: str, overrides: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "tracerl.cli", "train", recipe, *overrides], check=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--algos", nargs="+", default=list(ALGOS), choices=list(ALGOS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--root", default="runs/bench-credit")
    p.add_argument("--from-runs", metavar="ROOT", help="tabulate the finished runs under ROOT instead of running")
    args = p.parse_args(argv)
    root = Path(args.from_runs or args.root)
    if not args.from_runs:
        sft = root / "sft"
        if not (sft / "checkpoints" / "step_0").exists():
            _train("text_world", [f"run.dir={sft}", *SIZES, *SFT])
        for seed in args.seeds:
            for algo in args.algos:
                where = root / f"{algo}-s{seed}"
                if not _finished(where):
                    _train(ALGOS[algo], [f"run.dir={where}", f"run.seed={seed}", f"model.path={sft}/checkpoints/step_0",
                                         *SIZES, *RL, *EXTRA.get(algo, [])])
    rows = [row_of(d) for d in sorted(root.iterdir()) if d.name != "sft" and _finished(d)]
    print(table(rows))
    return 0


def table(rows: list[dict]) -> str:
    head = (f"{'algorithm':<9} {'seed':>4} {'start':>6} {'held-out':>8} {'change':>7} {'invalid':>7} {'loops':>6} "
            f"{'turns':>5} {'env steps':>9} {'succ/1k steps':>13} {'succ/min':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['algo']:<9} {r['seed']:>4} {r['start']:>6.3f} {r['success']:>8.3f} {r['success'] - r['start']:>+7.3f} "
                     f"{r['invalid_rate']:>7.3f} {r['repeat_rate']:>6.3f} {r['turns']:>5.2f} {r['env_steps']:>9.0f} "
                     f"{r['per_kstep']:>13.2f} {r['per_min']:>8.2f}")
    lines.append("")
    for algo in dict.fromkeys(r["algo"] for r in rows):
        mine = [r for r in rows if r["algo"] == algo]
        mean = sum(r["success"] for r in mine) / len(mine)
        lines.append(f"{algo:<9} mean held-out {mean:.3f} over {len(mine)} seeds")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
