"""Sync vs async RL under long-tail tool latency: wall time to a held-out target, accepted samples/s, ESS.

    python benchmarks/async.py [--seeds 0 1 2] [--etas 0 1 2 4] [--workers 4] [--steps 24] [--group 4] [key.sub=value ...]
    python benchmarks/async.py --sft-checkpoint 'runs/l2/s{seed}/sft-seed{seed}/checkpoints/step_0'  # reuse SFT runs

One SFT run per seed (no latency) gives the starting checkpoint; then every configuration trains RL
from it on math_tool with a long tail of environment latency: a fraction `--slow` of env steps
(tool calls and answers) takes `--slow-s` · exp(σ·z) seconds longer (`faults.slow_call`,
`faults.slow_s`, `faults.slow_sigma`; z standard normal). Configurations run one after another on
the same machine, so compare the ratios printed side by side, not the seconds.

Per configuration: wall time of the RL stage; wall time until held-out success first reaches the
target (by default sync's final held-out success, i.e. "the same success sync ends with";
`--target-frac 0.5` is halfway from the SFT score to it; the same target for every configuration of a
seed; linear between the two evaluations around the crossing); accepted (trained) trajectories per second; trajectories rejected as stale; the mean ESS
fraction of the importance weights π_prox/π_behavior (async; sync is on-policy: 1); final held-out
success; and the steady-state step time (median gap between consecutive RL steps, evaluation gaps
left out), which is the throughput once the workers are up. `rollout.workers` is min(`--workers`, η + 1)
(more could never be busy). `--sft-checkpoint` may hold `{seed}` (one checkpoint per seed). `--summarize LOG`
re-prints the table of a finished run; the last lines pool the seeds (mean of the per-seed ratios,
mean final success with its spread).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "tracerl.cli", "train", "default", "run.progress=false", "run.threads=1", *args]


def sft_checkpoint(seed: int, root: Path, common: list[str]) -> Path:
    run = root / f"sft-seed{seed}"
    if not (run / "checkpoints" / "step_0").exists():
        subprocess.run(_cmd(f"run.seed={seed}", f"run.dir={run}", "stages=[sft]", *common), check=True,
                       capture_output=True, text=True)
    return run / "checkpoints" / "step_0"


def run_config(label: str, seed: int, ckpt: Path, root: Path, overrides: list[str]) -> dict:
    run = root / f"{label}-seed{seed}"
    proc = subprocess.Popen(_cmd(f"run.seed={seed}", f"run.dir={run}", f"model.path={ckpt}", "stages=[eval,rl,eval]",
                                 *overrides), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t_rl, curve, tail = None, [], []
    for line in proc.stdout:
        now = time.time()
        tail = (tail + [line])[-30:]
        if line.startswith("rl stage"):
            t_rl = now
        elif line.startswith("eval after sft") or line.startswith("eval after base"):
            curve.append((0.0, float(line.split("held-out success ")[1].split()[0])))
        elif line.startswith("rl step") and "held-out" in line:
            curve.append((now - t_rl, float(line.split("held-out ")[1].split()[0])))
        elif line.startswith("eval after rl"):
            curve.append((now - t_rl, float(line.split("held-out success ")[1].split()[0])))
    if proc.wait() != 0:
        raise SystemExit(f"{label} seed {seed} failed:\n{''.join(tail)}")
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r["stage"] == "rl" and "reward/mean" in r]
    trained = sum(r.get("rollout/episodes", 0) for r in rl)
    ess = [r["async/ess_frac"] for r in rl if "async/ess_frac" in r]
    return {"label": label, "seed": seed, "curve": curve, "rl_wall_s": curve[-1][0], "trained": trained,
            "samples_per_s": trained / max(curve[-1][0], 1e-9), "stale": sum(r.get("async/rejected_stale", 0) for r in rl),
            "ess_frac": sum(ess) / len(ess) if ess else 1.0, "final": curve[-1][1], "start": curve[0][1],
            "step_s": steady_step_s(run, {r["step"] for r in rows if r["stage"] == "rl" and "eval/success" in r})}


def steady_step_s(run: Path, eval_steps: set[int]) -> float:
    """Median seconds between consecutive RL steps (store metric times), leaving out the gaps that hold an
    evaluation: the throughput once the workers are up, without start-up and eval."""
    import sqlite3

    with sqlite3.connect(run / "store.sqlite") as db:
        rows = db.execute("SELECT step, MIN(time) FROM metrics WHERE stage = 'rl' AND name = 'reward/mean' "
                          "GROUP BY step ORDER BY step").fetchall()
    gaps = sorted(b - a for (_, a), (step, b) in zip(rows, rows[1:]) if step not in eval_steps)
    return gaps[len(gaps) // 2] if gaps else float("nan")


def time_to(curve: list[tuple[float, float]], target: float) -> float | None:
    """Seconds until held-out success first reaches `target`, interpolated linearly between the evaluation
    before the crossing and the one at it (None if never reached)."""
    for (t0, s0), (t1, s1) in zip(curve, curve[1:]):
        if s1 >= target:
            return t1 if s1 == s0 or s0 >= target else t0 + (t1 - t0) * (target - s0) / (s1 - s0)
    return None


def pooled_curve(runs: list[dict]) -> list[tuple[float, float]]:
    """The seeds' curves averaged point by point (every configuration evaluates at the same steps)."""
    n = min(len(r["curve"]) for r in runs)
    return [(sum(r["curve"][i][0] for r in runs) / len(runs), sum(r["curve"][i][1] for r in runs) / len(runs))
            for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--etas", type=int, nargs="+", default=[0, 1, 2, 4])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--prompts", type=int, default=8, help="tasks per RL step")
    ap.add_argument("--group", type=int, default=4, help="rollouts per task")
    ap.add_argument("--slow", type=float, default=0.3, help="fraction of env steps with extra latency")
    ap.add_argument("--slow-s", type=float, default=0.4, help="median extra latency (s)")
    ap.add_argument("--sigma", type=float, default=1.0, help="log-normal spread of the extra latency")
    ap.add_argument("--eval-every", type=int, default=3, help="RL steps between held-out evaluations")
    ap.add_argument("--eval-tasks", type=int, default=100, help="held-out tasks per evaluation (2 samples each)")
    ap.add_argument("--target-frac", type=float, default=1.0,
                    help="target = SFT score + this fraction of sync's gain (1: sync's final held-out success)")
    ap.add_argument("--root", default=None)
    ap.add_argument("--sft-checkpoint", default=None, help="start every configuration from this checkpoint (skip SFT)")
    ap.add_argument("--summarize", default=None, help="re-print the table of a finished run from its log file")
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args()
    root = Path(a.root or tempfile.mkdtemp(prefix="tracerl-async-"))
    common = ["sft.demos=1200", "sft.epochs=6", *a.overrides]
    rl = [f"rl.steps={a.steps}", f"rl.prompts_per_step={a.prompts}", f"rl.group_size={a.group}", f"rl.eval_every={a.eval_every}",
          "rl.checkpoint_every=0", f"eval.tasks={a.eval_tasks}", "eval.samples=2", "eval.k=[1,2]",
          f"faults.slow_call={a.slow}", f"faults.slow_s={a.slow_s}", f"faults.slow_sigma={a.sigma}", *a.overrides]
    if a.summarize:  # print the table again from a finished run's log (its JSON lines)
        results = [json.loads(x) for x in Path(a.summarize).read_text().splitlines() if x.startswith("{")]
        for r in results:
            run = Path(a.summarize).parent / f"{r['label']}-seed{r['seed']}"
            rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
            r["step_s"] = steady_step_s(run, {x["step"] for x in rows if x["stage"] == "rl" and "eval/success" in x})
        return table(set_targets(results, a.target_frac), a)
    configs = [("sync", [])] + [(f"async-eta{e}", ["rl.mode=async", f"rl.max_staleness={e}",
                                                   f"rollout.workers={min(a.workers, e + 1)}"]) for e in a.etas]
    results = []
    for seed in a.seeds:
        ckpt = Path(a.sft_checkpoint.format(seed=seed)) if a.sft_checkpoint else sft_checkpoint(seed, root, common)
        per = set_targets([run_config(label, seed, ckpt, root, rl + extra) for label, extra in configs], a.target_frac)
        for r in per:
            print(json.dumps(r), flush=True)
        results += per
    table(results, a)


def set_targets(results: list[dict], frac: float) -> list[dict]:
    """Per seed: the target is the SFT score plus `frac` of the way to sync's final score (1: the held-out
    success sync ends with); every configuration's time to it."""
    for r in results:
        sync = next(x for x in results if x["seed"] == r["seed"] and x["label"] == "sync")
        r["target"] = sync["start"] + frac * (sync["final"] - sync["start"])
        r["time_to_target"] = time_to(r["curve"], r["target"])
    return results


def table(results: list[dict], a) -> None:
    print(f"\nseeds {a.seeds}; math_tool, {a.steps} RL steps of {a.prompts}x{a.group} episodes, {a.slow:.0%} of env steps +"
          f"{a.slow_s}s·exp({a.sigma}·z); async rows: min({a.workers}, η + 1) rollout workers. Ratios are against sync, same seed.")
    head = (f"{'config':<13} {'RL wall s':>9} {'x sync':>7} {'step s':>6} {'x sync':>7} {'to target s':>11} {'x sync':>7} {'samples/s':>9} "
            f"{'x sync':>7} {'stale':>6} {'ESS frac':>8} {'final':>6}")
    print(head + "\n" + "-" * len(head))
    for r in results:
        s = next(x for x in results if x["seed"] == r["seed"] and x["label"] == "sync")
        tt = r["time_to_target"]
        ts = s["time_to_target"]
        ratio_tt = f"{ts / tt:7.2f}" if tt and ts else f"{'-':>7}"
        print(f"{r['label'] + ' s' + str(r['seed']):<13} {r['rl_wall_s']:>9.0f} {s['rl_wall_s'] / r['rl_wall_s']:>7.2f} "
              f"{r['step_s']:>6.1f} {s['step_s'] / r['step_s']:>7.2f} "
              f"{(f'{tt:.0f}' if tt else 'not reached'):>11} {ratio_tt} {r['samples_per_s']:>9.2f} "
              f"{r['samples_per_s'] / s['samples_per_s']:>7.2f} {r['stale']:>6.0f} {r['ess_frac']:>8.3f} {r['final']:>6.3f}")
    print("(x sync: how many times faster than sync — wall, step and time-to-target ratios sync/config, samples/s "
          "config/sync; step s: median gap between RL steps without the evaluation gaps, i.e. after start-up)")
    seeds = sorted({r["seed"] for r in results})
    sync_pool = pooled_curve([r for r in results if r["label"] == "sync"])
    target = sync_pool[0][1] + a.target_frac * (sync_pool[-1][1] - sync_pool[0][1])
    t_sync = time_to(sync_pool, target)
    print(f"\npooled over seeds {seeds}: mean of the per-seed x-sync ratios; final held-out mean (min..max); "
          f"time to {target:.3f} on the seed-averaged curve (sync: {f'{t_sync:.0f} s' if t_sync else 'not reached'})")
    for label in dict.fromkeys(r["label"] for r in results):
        mine = [r for r in results if r["label"] == label]
        sync = {r["seed"]: r for r in results if r["label"] == "sync"}
        tt = [sync[r["seed"]]["time_to_target"] / r["time_to_target"] for r in mine
              if r["time_to_target"] and sync[r["seed"]]["time_to_target"]]
        wall = sum(sync[r["seed"]]["rl_wall_s"] / r["rl_wall_s"] for r in mine) / len(mine)
        finals = [r["final"] for r in mine]
        t_pool = time_to(pooled_curve(mine), target)
        pooled = f"{t_pool:4.0f} s x{t_sync / t_pool:5.2f}" if t_pool and t_sync else "not reached"
        print(f"{label:<13} wall x{wall:5.2f}  to target x{(sum(tt) / len(tt)) if tt else float('nan'):5.2f} "
              f"({len(tt)}/{len(mine)} seeds reached)  seed-averaged curve: {pooled}  final {sum(finals) / len(finals):.3f} "
              f"({min(finals):.3f}..{max(finals):.3f})")


if __name__ == "__main__":
    main()
