"""Run the default recipe for several seeds; print held-out success after SFT and after RL, and wall time.

    python benchmarks/default_run.py [--seeds 0 1 2] [key.sub=value ...]

Targets (issue 2): RL beats SFT by at least 15 points on average; each seed finishes within
10 minutes on a 2-core machine. Each seed runs in its own process so seeds cannot share state.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_seed(seed: int, overrides: list[str], root: Path) -> dict:
    run_dir = root / f"seed{seed}"
    t0 = time.time()
    cmd = [sys.executable, "-m", "tracerl.cli", "train", "default", f"run.seed={seed}", f"run.dir={run_dir}",
           "run.progress=false", *overrides]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if proc.returncode != 0:
        raise SystemExit(f"seed {seed} failed:\n{proc.stderr[-2000:]}")
    evals = json.loads((run_dir / "summary.json").read_text())["evals"]
    sft = next(e for e in evals if e["after"] == "sft")
    rl = next(e for e in evals if e["after"] == "rl")
    return {"seed": seed, "sft": sft["eval/success"], "rl": rl["eval/success"],
            "sft_tools": sft["eval/tool_calls_per_episode"], "rl_tools": rl["eval/tool_calls_per_episode"],
            "wall_s": wall, "run_dir": str(run_dir)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--root", default=None, help="where run directories go (default: a temp folder)")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    root = Path(args.root or tempfile.mkdtemp(prefix="tracerl-bench-"))
    rows = []
    print(f"{'seed':>4} {'held-out after SFT':>19} {'after RL':>9} {'gain (pts)':>11} {'tool calls SFT→RL':>18} {'wall':>7}")
    for seed in args.seeds:
        r = run_seed(seed, args.overrides, root)
        rows.append(r)
        print(f"{seed:>4} {r['sft']:>19.3f} {r['rl']:>9.3f} {100 * (r['rl'] - r['sft']):>11.1f} "
              f"{r['sft_tools']:>8.2f} → {r['rl_tools']:<7.2f} {r['wall_s'] / 60:>6.1f}m", flush=True)
    n = len(rows)
    sft, rl = sum(r["sft"] for r in rows) / n, sum(r["rl"] for r in rows) / n
    worst = max(r["wall_s"] for r in rows)
    print(f"{'mean':>4} {sft:>19.3f} {rl:>9.3f} {100 * (rl - sft):>11.1f} {'':>18} {worst / 60:>6.1f}m (slowest)")
    print(f"target: gain >= 15 pts -> {'PASS' if rl - sft >= 0.15 else 'FAIL'}; "
          f"slowest seed <= 10 min -> {'PASS' if worst <= 600 else 'FAIL'}")
    print(f"run directories under {root}")


if __name__ == "__main__":
    main()
