"""Level 6: multi-environment production mixture (math_tool, code_tests, search_qa), with
benchmarks/multi_env.py's machinery: one SFT start over the three domains, then per seed the joint
mixture schedule (every update holds each domain's whole batch, shares 1:1:1), stages eval -> rl -> eval.

Gate (reference §10, Level 6): no domain's held-out success falls below its SFT start by more than the
predeclared tolerance (every seed); the mixture weights observed in the trained batches (episodes per
domain in the stored RL steps, after any filtering) match the intended 1:1:1 within a tolerance; and
every held-out number before and after RL was produced by the same frozen evaluation protocol (the
protocol digest the run records beside each evaluation is the same at start and end)."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

from . import gates as G

BENCH = Path(__file__).parents[1] / "multi_env.py"
CONTENDER = "mixture-joint"
STEPS, PROMPTS, GROUP = 12, 12, 8
SET = ["envs.0.heldout_tasks=240", "envs.0.eval_tasks=240"]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_multi_env", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def observed_shares(run_dir: Path) -> dict[str, float]:
    """Each domain's share of the episodes stored for the RL stage (what the learner trained on)."""
    from tracerl.store.export import rows
    from tracerl.store.rundir import RunDir

    n = Counter(traj.env_name for _, _, traj in rows(RunDir(run_dir), stage="rl"))
    total = sum(n.values()) or 1
    return {k: v / total for k, v in sorted(n.items())}


def protocols(run_dir: Path) -> list[dict]:
    """Per evaluation, every protocol digest it recorded (keys ending in 'protocol')."""
    evals = json.loads((run_dir / "summary.json").read_text())["evals"]
    return [{k: v for k, v in e.items() if k.endswith("protocol")} for e in evals]


def run(args, gates: dict, root: Path, results: dict) -> tuple[str, list[G.Check]]:
    b = _bench()
    steps = 2 if args.quick else STEPS
    preset = "small" if args.quick else "learn"
    sizes = [*b.PRESETS[preset], *b.COMMON, f"rl.prompts_per_step={PROMPTS}", f"rl.group_size={GROUP}",
             *([] if args.quick else SET)]
    sft = root / "sft"
    if not (sft / "checkpoints" / "step_0").exists():
        b._train([f"run.dir={sft}", *sizes, "stages=[sft]"])
    results.setdefault("runs", [])
    done = {r["seed"] for r in results["runs"]}
    overrides = b.contenders(steps, PROMPTS)[CONTENDER]
    for seed in args.seeds:
        if seed in done:
            continue
        where = root / f"{CONTENDER}-s{seed}"
        if not b._finished(where):
            b._train([f"run.dir={where}", f"run.seed={seed}", f"model.path={sft}/checkpoints/step_0", *sizes,
                      *overrides, "stages=[eval,rl,eval]"])
        row = b.row_of(where)
        row.update(shares=observed_shares(where), protocols=protocols(where))
        results["runs"].append(row)
        args.save()
    return table(results), checks(results, gates)


DOMAINS = ("math_tool", "code_tests", "search_qa")


def table(results: dict) -> str:
    head = f"{'seed':>4} " + " ".join(f"{d + ' start':>16} {d + ' end':>14}" for d in DOMAINS) + "  observed shares"
    lines = [head]
    for r in results.get("runs", []):
        lines.append(f"{r['seed']:>4} " + " ".join(f"{r['start/' + d]:>16.3f} {r[d]:>14.3f}" for d in DOMAINS)
                     + "  " + " ".join(f"{k} {v:.3f}" for k, v in r["shares"].items()))
    return "\n".join(lines)


def checks(results: dict, gates: dict) -> list[G.Check]:
    lv = "level6"
    runs = results.get("runs", [])
    drop = max((r["start/" + d] - r[d] for r in runs for d in DOMAINS), default=None)
    share_err = max((abs(r["shares"].get(d, 0.0) - 1 / len(DOMAINS)) for r in runs for d in DOMAINS), default=None)
    frozen = all(p == r["protocols"][0] and p for r in runs for p in r["protocols"]) if runs else None
    return [G.at_most("largest drop of a domain below its SFT start, worst seed", drop, G.threshold(gates, lv, "regress_tol")),
            G.at_most("largest |observed - intended| domain share in trained batches", share_err,
                      G.threshold(gates, lv, "share_tol"), "intended 1/3 each"),
            G.at_least("every evaluation under the same frozen protocol (1 = yes)", None if frozen is None else float(frozen),
                       G.threshold(gates, lv, "frozen_protocol_min"))]
