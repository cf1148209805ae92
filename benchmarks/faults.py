"""A run under injected faults beside a clean one: it completes, no infra episode is rewarded,
every infra episode is labelled by kind, and the step time stays within a stated factor.

    .venv/bin/python benchmarks/faults.py [--steps 4] [--rate 0.1] [--json]

Both runs are the `smoke` recipe (run.threads=1). The faulty one sets each of the five failing
env kinds (tool crash, hang, garbage output, env exception, verifier error) to rate/5, so `rate` of
all env steps fail, plus slow calls at `rate` and engine errors (a row's generate failing) at
rate/5 per row and turn; its held-out evaluations also report the `faults` slice beside the clean one. Reported per run: RL step seconds (rollout +
learner, median over steps), episodes, infra episodes by kind, infra episodes with a non-zero
reward (must be 0). The group baselines' exclusion of infra episodes is the trainer's
(algorithms/batch.py `baseline_B`); here it shows as `rollout/infra_failures` in the metrics.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tracerl.contract import TerminalReason
from tracerl.config.faults import KINDS
from tracerl.rollout.faults import count_faults
from tracerl.store import RunDir

FACTOR = 3.0  # at most this many times a clean step: each hang costs hang_s, and env steps run one after another


def run(dir_: Path, steps: int, faults: dict[str, float], extra: list[str] = ()) -> dict:
    args = [sys.executable, "-m", "tracerl.cli", "train", "smoke", "run.threads=1", f"rl.steps={steps}",
            f"run.dir={dir_}"] + [f"faults.{k}={v}" for k, v in faults.items()] + list(extra)
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the run failed (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    run_dir = RunDir(dir_)
    try:
        trajs = list(run_dir.store.trajectories(stage="rl"))
        step_s = {}
        for m in run_dir.read_metrics():
            if m.get("stage") == "rl" and m.get("time/rollout_s") is not None:
                step_s[m["step"]] = m["time/rollout_s"] + (m.get("time/learner_s") or 0.0)
        infra = [t for t in trajs if t.terminal_reason == TerminalReason.INFRA_FAILURE]
        evals = json.loads((dir_ / "summary.json").read_text())["evals"]
        heldout = {e["after"]: (round(e["eval/success"], 3), round(e.get("eval/slice/faults/success", float("nan")), 3),
                                round(e.get("eval/slice/faults/infra_failure_rate", float("nan")), 3)) for e in evals}
        return {"heldout clean/faults/faults-infra": heldout,"completed": True, "episodes": len(trajs), "infra": len(infra), "by_kind": count_faults(trajs),
                "infra_rewarded": sum(t.reward != 0.0 for t in infra),
                "step_s": statistics.median(step_s.values()) if step_s else float("nan")}
    finally:
        run_dir.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rate", type=float, default=0.1)
    parser.add_argument("--json", action="store_true")
    a = parser.parse_args()
    faults = {k: a.rate / len(KINDS) for k in KINDS} | {"engine_error": a.rate / len(KINDS), "slow_call": a.rate,
                                                        "hang_s": 0.2, "seed": 1}
    with tempfile.TemporaryDirectory() as tmp:
        clean = run(Path(tmp) / "clean", a.steps, {})
        faulty = run(Path(tmp) / "faulty", a.steps, faults, ["eval.slices=[faults]"])
    ratio = faulty["step_s"] / clean["step_s"]
    ok = faulty["completed"] and faulty["infra_rewarded"] == 0 and "unlabelled" not in faulty["by_kind"] and ratio <= FACTOR
    if a.json:
        print(json.dumps({"clean": clean, "faulty": faulty, "ratio": ratio, "ok": ok}, indent=2))
    else:
        for name, r in (("clean", clean), ("faulty", faulty)):
            print(f"{name:<7} episodes {r['episodes']:>4}  infra {r['infra']:>3}  rewarded infra {r['infra_rewarded']}  "
                  f"step {r['step_s']:.2f} s  by kind {r['by_kind']}")
            print(f"        held-out (clean, faults slice, its infra rate) {r['heldout clean/faults/faults-infra']}")
        print(f"faulty/clean step time {ratio:.2f} (target <= {FACTOR}); {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
