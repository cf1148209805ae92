"""Level 4: does step-level credit beat terminal-reward broadcast on a stateful environment at equal
environment steps? On text_world and workplace_db.

    .venv/bin/python benchmarks/credit.py                       # text_world, 3 seeds × grpo, ppo, prime, gigpo
    .venv/bin/python benchmarks/credit.py --env workplace_db --seeds 0
    .venv/bin/python benchmarks/credit.py --env text_world workplace_db   # both, 3 seeds each
    .venv/bin/python benchmarks/credit.py --seeds 0 --algos grpo gigpo
    .venv/bin/python benchmarks/credit.py --from-runs runs/bench-credit   # table of finished runs (both envs)

Per environment, one SFT start is trained first (the env recipe's `sft` stage at the sizes below, into
<root>/sft for text_world, <root>/workplace_db-sft for workplace_db); every (algorithm, seed) run then
starts from it (`model.path`), with stages eval → rl → eval and, within an env, the same rollout budget:
`rl.steps` × `rl.prompts_per_step` × `rl.group_size` episodes (text_world 8 × 8 × 4, workplace_db, whose
steps are short, 30 × 16 × 8). text_world runs use the shipped recipes (text_world,
ppo, prime, gigpo); workplace_db runs use the workplace_db recipe with each of those recipes' algorithm
settings. The seed changes the RL sampling and task order, not the SFT start. Columns, from each run's
store: held-out success after RL (avg@n), its change from the SFT start, invalid actions per policy
turn (workplace_db: malformed and blocked calls), the loop rate, turns per episode (all of the final
evaluation), the environment steps RL used, and training successes per 1,000 environment steps and per
RL wall minute. A loop is, on text_world, a valid action that leads back to a state the episode had
already been in; on workplace_db, whose state is the database (a lookup leaves it unchanged), a valid
call that repeats an earlier call of the episode made in the same state.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ALGOS = {"grpo": "text_world", "ppo": "ppo", "prime": "prime", "gigpo": "gigpo"}  # algorithm → text_world recipe
# the same algorithm settings on workplace_db (from recipes ppo / prime / gigpo; grpo is the recipe's own)
WORKPLACE = {"grpo": [],
             "ppo": ["rl.algorithm={name: ppo, alpha: 0.05, lam_value: 1.0, value_clip: 0.2, clip_low: 0.2, "
                     "clip_high: 0.28, aggregation: token, nll: {coef: 0.1}}", "roles.critic={lr: 0.001}"],
             "prime": ["rl.algorithm={name: prime, beta: 0.05, gamma: 1.0, label_threshold: 0.0, clip_low: 0.2, "
                       "clip_high: 0.28, aggregation: token}"],
             "gigpo": ["rl.algorithm={name: gigpo, omega: 1.0, gamma: 0.95, scale: std, clip_low: 0.2, "
                       "clip_high: 0.28, aggregation: token}"]}
SUCCESS = {"text_world": "success", "workplace_db": "correct"}  # the reward component that is success
SIZES = ["env.train_tasks=800", "env.heldout_tasks=50", "eval.tasks=50", "eval.samples=2", "eval.k=[1,2]",
         "rl.checkpoint_every=100", "rl.eval_every=0", "run.threads=1", "run.progress=false"]
SFT = {"text_world": ["sft.demos=600", "sft.epochs=4", "stages=[sft]"],
       # the recipe's own SFT (2000 × 10 at lr 1e-3; smaller did not copy ids) on its own pools: 3000 training
       # tasks (SIZES' 800 would cap the demonstrations) and 200 held-out ones (their prompts are in the tiny
       # tokenizer's corpus; with SIZES' 50 the SFT reached 0.09 held-out, with 200 0.240)
       "workplace_db": ["stages=[sft]", "env.train_tasks=3000", "env.heldout_tasks=200"]}
RL = {"text_world": ["rl.steps=8", "rl.prompts_per_step=8", "rl.group_size=4", "stages=[eval,rl,eval]"],
      # ~2 s a step: the recipe's batch for 30 steps, and 200 held-out tasks (standard error ≈ 0.02 at avg@2)
      "workplace_db": ["rl.steps=30", "rl.prompts_per_step=16", "rl.group_size=8", "env.heldout_tasks=200",
                       "eval.tasks=200", "stages=[eval,rl,eval]"]}
EXTRA = {"ppo": ["roles.critic.pretrain_steps=2"]}  # VAPO's value pretraining, scaled to the 8-step budget
INVALID = {"invalid_action", "blocked_action"}


def episode_stats(trajs, *, success: str = "success", loop: str = "revisit") -> dict[str, float]:
    """Invalid actions per turn; loops per turn; turns per episode; successes (reward component
    `success` > 0) and environment steps (turns) in all. `loop="revisit"`: a valid action that leads back
    to a state the episode was already in; `loop="repeat"`: a valid action whose (state before it, sampled
    ids) pair the episode already had."""
    turns = invalid = repeated = successes = 0
    for t in trajs:
        state, seen, calls, last = t.initial_state_hash, {t.initial_state_hash}, set(), None
        for s in t.spans:
            if s.kind == "action":
                turns += 1
                last = (state, s.sampled_ids_sha256 or tuple(t.token_ids[s.start:s.end]))
            elif s.kind == "observation":
                bad = s.tool_status in INVALID
                invalid += bad
                if loop == "repeat" and last is not None:
                    repeated += (not bad) and last in calls
                    calls.add(last)
                if s.state_hash is not None:  # an invalid action stays put: counted as invalid, not as a loop
                    if loop == "revisit":
                        repeated += (not bad) and s.state_hash in seen
                    seen.add(s.state_hash)
                    state = s.state_hash
        successes += t.reward_components.get(success, 0.0) > 0
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
    env = config["env"]["name"]
    kind = {"success": SUCCESS.get(env, "success"), "loop": "repeat" if env == "workplace_db" else "revisit"}
    with Store(run_dir / "store.sqlite") as store:
        train = episode_stats(list(store.trajectories(stage="rl")), **kind)
        final = [t for tid in ids for t in store.trajectories(trajectory_id=tid)]
    rl = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rl_wall = sum(m.get("time/rollout_s", 0.0) + m.get("time/learner_s", 0.0) for m in rl if m.get("stage") == "rl")
    ev = episode_stats(final, **kind)
    return {"env": env, "algo": config["rl"]["algorithm"]["name"], "seed": config["run"]["seed"],
            "start": evals["base"]["eval/success"], "success": evals["rl"]["eval/success"],
            "invalid_rate": ev["invalid_rate"], "repeat_rate": ev["repeat_rate"], "turns": ev["turns"],
            "env_steps": train["env_steps"], "per_kstep": 1000 * train["successes"] / max(train["env_steps"], 1),
            "per_min": 60 * train["successes"] / max(rl_wall, 1e-9), "wall_s": summary["wall_s"]}


def _finished(run_dir: Path, recipe: str | None = None, overrides: list[str] = ()) -> bool:
    """Whether `run_dir` holds a finished run; given the `recipe` and `overrides` it is meant to hold, a finished
    run trained under other settings is refused (SystemExit, one sentence), never reused as if it matched."""
    summary = run_dir / "summary.json"
    done = summary.exists() and "wall_s" in json.loads(summary.read_text())
    if done and recipe is not None:
        why = settings_differ(run_dir, recipe, overrides)
        if why:
            raise SystemExit(f"error: {run_dir} holds a finished run trained with other settings ({why}); "
                             "run under a new --root, or remove that directory")
    return done


def settings_differ(run_dir: Path, recipe: str, overrides: list[str]) -> str | None:
    """The first setting at which `run_dir`'s config.yaml differs from what `recipe` + `overrides` resolve to
    ('key: there, here'), or None. Settings one side lacks (added to tracerl after the run) are not compared."""
    import yaml

    from tracerl.config import load_recipe

    def first(have, want, path=""):
        if isinstance(have, dict) and isinstance(want, dict):
            for k in sorted(set(have) & set(want)):
                if k != "dir" or path != "run":  # where the run lies is not a setting
                    d = first(have[k], want[k], f"{path}.{k}" if path else k)
                    if d:
                        return d
            return None
        return None if have == want else f"{path}: {have!r} there, {want!r} here"

    return first(yaml.safe_load((run_dir / "config.yaml").read_text()),
                 load_recipe(recipe, list(overrides)).model_dump(mode="json"))


def _train(recipe: str, overrides: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "tracerl.cli", "train", recipe, *overrides], check=True)


def plan(env: str, algos: list[str], seeds: list[int], root: Path, extra: list[str] = ()
         ) -> list[tuple[str, list[str], Path]]:
    """(recipe, overrides, run dir) of the SFT start, then of every (seed, algorithm) run, of one env;
    `extra` overrides go last on every run (e.g. a smaller size)."""
    prefix = "" if env == "text_world" else f"{env}-"  # text_world keeps the layout of earlier roots
    sft = root / f"{prefix}sft"
    runs = [(env, [f"run.dir={sft}", *SIZES, *SFT[env], *extra], sft)]
    for seed in seeds:
        for algo in algos:
            where = root / f"{prefix}{algo}-s{seed}"
            recipe, own = (ALGOS[algo], []) if env == "text_world" else (env, WORKPLACE[algo])
            runs.append((recipe, [f"run.dir={where}", f"run.seed={seed}", f"model.path={sft}/checkpoints/step_0",
                                  *SIZES, *RL[env], *own, *EXTRA.get(algo, []), *extra], where))
    return runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", nargs="+", default=["text_world"], choices=list(SUCCESS))
    p.add_argument("--algos", nargs="+", default=list(ALGOS), choices=list(ALGOS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--root", default="runs/bench-credit")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                   help="overrides for every run, after the benchmark's (a smoke: sft.demos=300 rl.steps=2 eval.tasks=10)")
    p.add_argument("--from-runs", metavar="ROOT", help="tabulate the finished runs under ROOT instead of running")
    args = p.parse_args(argv)
    root = Path(args.from_runs or args.root)
    if not args.from_runs:
        for env in args.env:
            (recipe, overrides, sft), *runs = plan(env, args.algos, args.seeds, root, args.set)
            if not (sft / "checkpoints" / "step_0").exists():
                _train(recipe, overrides)
            for recipe, overrides, where in runs:
                if not _finished(where, recipe, overrides):
                    _train(recipe, overrides)
    rows = [row_of(d) for d in sorted(root.iterdir()) if not d.name.endswith("sft") and _finished(d)]
    print(table(rows))
    return 0


def table(rows: list[dict]) -> str:
    head = (f"{'env':<12} {'algorithm':<9} {'seed':>4} {'start':>6} {'held-out':>8} {'change':>7} {'invalid':>7} "
            f"{'loops':>6} {'turns':>5} {'env steps':>9} {'succ/1k steps':>13} {'succ/min':>8}")
    lines = [head, "-" * len(head)]
    rows = sorted(rows, key=lambda r: (r.get("env", "text_world") != "text_world", r.get("env", "text_world")))
    for r in rows:
        lines.append(f"{r.get('env', 'text_world'):<12} {r['algo']:<9} {r['seed']:>4} {r['start']:>6.3f} "
                     f"{r['success']:>8.3f} {r['success'] - r['start']:>+7.3f} "
                     f"{r['invalid_rate']:>7.3f} {r['repeat_rate']:>6.3f} {r['turns']:>5.2f} {r['env_steps']:>9.0f} "
                     f"{r['per_kstep']:>13.2f} {r['per_min']:>8.2f}")
    lines.append("")
    for env, algo in dict.fromkeys((r.get("env", "text_world"), r["algo"]) for r in rows):
        mine = [r for r in rows if r.get("env", "text_world") == env and r["algo"] == algo]
        mean = sum(r["success"] for r in mine) / len(mine)
        lines.append(f"{env:<12} {algo:<9} mean held-out {mean:.3f} over {len(mine)} seeds")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
