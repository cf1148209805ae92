"""Level 4: stateful multi-turn credit. Terminal-reward broadcast (grpo) against three step-level credit
methods (ppo: a critic with GAE; prime: an implicit process reward model; gigpo: step groups anchored on
repeated states) on workplace_db, whose state is a database, from one SFT start, at the same RL rollout
budget (steps x prompts x group), with benchmarks/credit.py's machinery (its SFT start, its per-algorithm
settings, its episode statistics).

Measured per (method, seed), on the final held-out evaluation against the same run's evaluation of its SFT
start (same tasks, same evaluation seed): held-out success, invalid actions per turn, repeated calls per
turn (a valid call repeating an earlier call of the episode in the same database state), the truncation
rate (episodes cut off at the turn or token budget: "timeout gaming"), the environment steps RL used,
training successes per 1,000 environment steps and per RL wall hour, and verifier disagreement: every
final held-out episode's actions replayed in a fresh environment (the task regenerated from the run's
config, reset with the stored seed), its success there against the stored one.

Gate (reference §10, Level 4): the best method (highest mean held-out gain) improves held-out success
(mean over seeds, and a floor at its worst seed) without more invalid actions, loops or truncations than
its start, at an environment-step budget no larger than the methods' mean (a tolerance), and the replay
agrees with the stored scores. Thresholds: benchmarks/ladder_gates.yaml, level4."""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from . import common, gates as G

CREDIT_BENCH = Path(__file__).parents[1] / "credit.py"
ENV = "workplace_db"
ALGOS = ["grpo", "ppo", "prime", "gigpo"]
# credit.py's sizes with the workplace_db recipe's 50 RL steps (16 prompts x 8): at credit.py's 30 steps grpo
# moved +0.011 (docs/algorithms.md), at the recipe's 50 +0.045 and +0.080 (docs/envs/workplace_db.md)
# attempt 1 (benchmarks/ladder_results/level4-attempt1.json): EXTRA = ["rl.steps=50"] at the recipe's lr 5e-4; grpo
# +0.029 mean, but prime collapsed at every seed, ppo and gigpo at one (invalid calls end episodes early), so the
# methods' mean env steps fell and grpo's 1.109x of it failed the budget clause. Attempt 2 (level4-attempt2.json):
# half the policy lr, all four; the best mean gain (gigpo) looped into the turn budget at one seed. Under the
# recipe's `rl.truncation: mask` an episode cut at the turn budget is left out of the loss, so nothing in the update
# pushes against a loop. Attempt 3 (level4-attempt3.json): such episodes are kept as the failures they are (`keep`:
# reward 0), all four; gigpo, the best mean, met every clause but the mean gain (+0.018 < 0.02: +0.042 -0.005
# +0.017), with invalid calls, loops and truncations all falling and no collapse at any seed. Attempt 4: the same
# settings for twice the RL budget, 100 steps, all four methods (still equal environment-step budgets); gigpo,
# the best mean (+0.067, worst +0.035), failed only the truncation clause (+0.18): under `keep` an episode cut at the
# turn budget scores 0, the same as a wrong answer, so running out the turns costs the policy nothing more than
# answering wrong. Attempt 5: attempt 4's settings with `rl.truncation=penalize` (rl.truncation_penalty -1.0, the
# default): a truncated episode is worse than any answered one, all four methods; attempt 4's SFT start (copied).
# Attempt 6 (declared while attempt 5 ran, after its first three runs: gigpo seed 0 fell 0.115 -> 0.055, its calls
# per episode 2.0 -> 0.6-0.8 from step 11 on: a -1 for a truncated episode made looking up before answering look bad
# at the first turn's anchor state, so the policy answered without looking): attempt 4's settings with a penalty
# of -0.1, a tie-breaker that makes running out the turns worse than a wrong answer without making it worse than
# not trying; all four methods, attempt 4's SFT start (copied), `--root runs/ladder/level4-penalty0.1`. Run beside
# attempt 5, both were too slow for the session (6 runs on 2 cores, ~40 min per run); attempt 6 was stopped after 1
# of its 12 runs (level4-attempt6.json, not a result) so that attempt 5 could finish. Attempt 6 resumed on its own
# in the next session from that file (its grpo seed-0 row kept; the three partial run directories removed), with
# `--root runs/ladder/level4-penalty0.1 --out benchmarks/ladder_results/level4-attempt6.json`; it passed (renamed
# level4.json; attempt 5 is level4-attempt5.json). EXTRA is attempt 6's.
EXTRA = ["rl.steps=100", "rl.lr=0.00025", "rl.truncation=penalize", "rl.truncation_penalty=-0.1"]
QUICK = ["sft.demos=64", "sft.epochs=1", "rl.steps=2", "rl.prompts_per_step=4", "rl.group_size=4",
         "env.heldout_tasks=10", "eval.tasks=10"]
PARALLEL = 3  # runs at a time, one thread each (a scheduling choice: each run is seeded and deterministic)
CUT = {"max_turns", "max_tokens", "wall_timeout"}  # cut off by a budget, not ended by the policy or the env


def _credit():
    spec = importlib.util.spec_from_file_location("bench_credit", CREDIT_BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _reason(t) -> str:
    r = t.terminal_reason
    return getattr(r, "value", r) or ""


def truncation_rate(trajs) -> float:
    """Episodes cut off by the turn, token or wall budget, per episode."""
    return sum(_reason(t) in CUT or bool(t.truncated) for t in trajs) / max(len(trajs), 1)


def replay_success(traj, task, spec, decode) -> float:
    """1.0 when the episode's actions, replayed in a fresh env reset with its task and seed, end in success.
    An action the loop cut at the token budget was never sent to the env, so it is not replayed; an episode
    the env does not end (cut at the turn budget) is no success."""
    actions = [decode(traj.token_ids[s.start:s.end]) for s in traj.spans if s.kind == "action"]
    if _reason(traj) == "max_tokens" and actions:
        actions = actions[:-1]
    env = spec.make()
    env.reset(task, traj.reset_seed)
    for text in actions:
        step = env.step(text)
        if step.terminated:
            return float(step.reward_components.get("correct", 0.0) > 0)
    return 0.0


def disagreement(stored: list[float], replayed: list[float | None]) -> dict[str, float]:
    """Fraction of episodes the replay scores otherwise than the store; one whose task cannot be rebuilt
    (None) counts as a disagreement, never as agreement."""
    n = len(stored)
    bad = sum(r is None or (r > 0) != (s > 0) for s, r in zip(stored, replayed))
    return {"episodes": float(n), "disagree": float(bad), "disagreement": bad / n if n else float("nan"),
            "replay_success": sum(r or 0.0 for r in replayed) / n if n else float("nan")}


def _eval_ids(run_dir: Path, step: int) -> list[str]:
    db = sqlite3.connect(run_dir / "store.sqlite")
    try:
        return [r[0] for r in db.execute("SELECT trajectory_id FROM trajectories WHERE stage LIKE 'eval%' AND step=?",
                                         (step,))]
    finally:
        db.close()


def measure(run_dir: Path, credit=None) -> dict:
    """credit.py's row of a finished run, plus the start's rates, truncation, per wall hour and the replay audit."""
    import yaml
    from transformers import AutoTokenizer

    from tracerl.envs.base import get_env
    from tracerl.store import Store

    credit = credit or _credit()
    row = credit.row_of(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    evals = {e["after"]: e for e in summary["evals"]}
    with Store(run_dir / "store.sqlite") as store:
        get = lambda ids: [t for tid in ids for t in store.trajectories(trajectory_id=tid)]  # noqa: E731
        before, after = get(_eval_ids(run_dir, evals["base"]["step"])), get(_eval_ids(run_dir, evals["rl"]["step"]))
    kind = {"success": credit.SUCCESS[ENV], "loop": "repeat"}
    b = credit.episode_stats(before, **kind)
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    spec = get_env(cfg["env"]["name"])
    tasks = {t.id: t for t in spec.generate("heldout", cfg["env"]["heldout_tasks"], cfg["run"]["seed"],
                                            tuple(cfg["env"]["heldout_difficulty"]))}
    tok = AutoTokenizer.from_pretrained(str(run_dir / "tokenizer"), local_files_only=True)
    decode = lambda ids: tok.decode(ids, skip_special_tokens=True)  # noqa: E731  (as the agent loop decodes)
    stored = [float(t.reward_components.get("correct", 0.0) > 0) for t in after]
    replayed = [replay_success(t, tasks[t.task_id], spec, decode) if t.task_id in tasks else None for t in after]
    row.update(start_invalid=b["invalid_rate"], start_repeat=b["repeat_rate"], start_trunc=truncation_rate(before),
               trunc=truncation_rate(after), per_hour=60 * row["per_min"], v2=disagreement(stored, replayed))
    return row


def run(args, gates: dict, root: Path, results: dict) -> tuple[str, list[G.Check]]:
    credit = _credit()
    extra = [*EXTRA, *(QUICK if args.quick else [])]
    results.setdefault("rows", [])
    results["env"], results["extra_overrides"] = ENV, extra
    done = {(r["algo"], r["seed"]) for r in results["rows"]}
    (recipe, overrides, sft), *runs = credit.plan(ENV, ALGOS, args.seeds, root, extra)
    if not (sft / "checkpoints" / "step_0").exists():
        credit._train(recipe, overrides)
    if "sft" not in results:
        results["sft"] = {"checkpoint": str(sft / "checkpoints" / "step_0"),
                          "wall_s": json.loads((sft / "summary.json").read_text()).get("wall_s")}
        args.save()
    todo = [(r, o, w) for r, o, w in runs
            if (w.name.split("-")[-2], int(w.name.split("-s")[-1])) not in done]

    def one(job):
        recipe, overrides, where = job
        if not credit._finished(where, recipe, overrides):
            credit._train(recipe, overrides)
        return where

    with ThreadPoolExecutor(PARALLEL) as pool:
        for fut in as_completed([pool.submit(one, j) for j in todo]):
            try:
                where = fut.result()
            except Exception as e:  # one failed run is a missing row (the seeds clause fails), not a lost level
                print(f"  run failed: {e}", flush=True)
                continue
            row = measure(where, credit)
            results["rows"].append(row)
            args.save()
            print(f"  {row['algo']} seed {row['seed']}: {row['start']:.3f} -> {row['success']:.3f}, "
                  f"replay disagreement {row['v2']['disagreement']:.3f}", flush=True)
    return table(results), checks(results, gates)


def per_method(rows: list[dict]) -> dict[str, dict]:
    """Per method: seeds, mean and worst-seed held-out gain, mean increases of the three rates, mean env steps."""
    out = {}
    for algo in dict.fromkeys(r["algo"] for r in rows):
        mine = [r for r in rows if r["algo"] == algo]
        gains = [r["success"] - r["start"] for r in mine]
        out[algo] = {"seeds": len({r["seed"] for r in mine}), "gain_mean": common.mean(gains), "gain_worst": min(gains),
                     "gains": gains,
                     "invalid_up": common.mean(r["invalid_rate"] - r["start_invalid"] for r in mine),
                     "loop_up": common.mean(r["repeat_rate"] - r["start_repeat"] for r in mine),
                     "trunc_up": common.mean(r["trunc"] - r["start_trunc"] for r in mine),
                     "env_steps": common.mean(r["env_steps"] for r in mine)}
    return out


def best_method(rows: list[dict]) -> str | None:
    """The method with the highest mean held-out gain (the gate judges this one)."""
    m = per_method(rows)
    return max(m, key=lambda a: m[a]["gain_mean"]) if m else None


def table(results: dict) -> str:
    rows = sorted(results.get("rows", []), key=lambda r: (ALGOS.index(r["algo"]) if r["algo"] in ALGOS else 9, r["seed"]))
    head = (f"{'method':<6} {'seed':>4} {'start':>6} {'after':>6} {'change':>7} {'invalid/turn':>13} {'loops/turn':>11} "
            f"{'truncated':>11} {'env steps':>9} {'succ/1k st':>10} {'succ/hour':>9} {'replay dis':>10}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['algo']:<6} {r['seed']:>4} {r['start']:>6.3f} {r['success']:>6.3f} {r['success'] - r['start']:>+7.3f} "
                     f"{r['start_invalid']:>6.3f}>{r['invalid_rate']:<6.3f} {r['start_repeat']:>5.3f}>{r['repeat_rate']:<5.3f} "
                     f"{r['start_trunc']:>5.3f}>{r['trunc']:<5.3f} {r['env_steps']:>9.0f} {r['per_kstep']:>10.1f} "
                     f"{r['per_hour']:>9.0f} {r['v2']['disagreement']:>10.3f}")
    lines.append("")
    for algo, m in per_method(rows).items():
        lines.append(f"{algo:<6} {m['seeds']} seeds: gain mean {m['gain_mean']:+.3f} worst {m['gain_worst']:+.3f}; "
                     f"invalid {m['invalid_up']:+.3f}, loops {m['loop_up']:+.3f}, truncated {m['trunc_up']:+.3f}; "
                     f"env steps {m['env_steps']:.0f}")
    return "\n".join(lines)


def checks(results: dict, gates: dict) -> list[G.Check]:
    lv = "level4"
    rows = results.get("rows", [])
    m = per_method(rows)
    best = best_method(rows)
    b = m.get(best, {})
    mean_steps = common.mean(x["env_steps"] for x in m.values())
    fewest = min((m.get(a, {"seeds": 0})["seeds"] for a in ALGOS), default=0)
    return [
        G.at_least("seeds run for every one of the four methods", fewest, G.threshold(gates, lv, "seeds_min")),
        G.at_least(f"best method ({best}): held-out gain over its SFT start, mean over seeds", b.get("gain_mean"),
                   G.threshold(gates, lv, "heldout_gain_min"),
                   "per seed " + " ".join(f"{g:+.3f}" for g in b.get("gains", []))),
        G.at_least(f"best method ({best}): held-out gain, worst seed", b.get("gain_worst"),
                   G.threshold(gates, lv, "heldout_gain_worst_min")),
        G.at_most(f"best method ({best}): invalid actions per turn, increase (mean over seeds)", b.get("invalid_up"),
                  G.threshold(gates, lv, "invalid_increase_max")),
        G.at_most(f"best method ({best}): repeated calls per turn, increase (mean over seeds)", b.get("loop_up"),
                  G.threshold(gates, lv, "loop_increase_max")),
        G.at_most(f"best method ({best}): truncated episodes, increase (mean over seeds)", b.get("trunc_up"),
                  G.threshold(gates, lv, "truncation_increase_max")),
        G.at_most(f"best method ({best}): RL env steps / the four methods' mean",
                  b["env_steps"] / mean_steps if b and mean_steps else None, G.threshold(gates, lv, "env_steps_ratio_max")),
        G.at_most("replay-verifier disagreement on final held-out episodes, worst run",
                  max((r["v2"]["disagreement"] for r in rows), default=None), G.threshold(gates, lv, "v2_disagreement_max")),
    ]
