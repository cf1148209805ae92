"""Level 2: single-turn RLVR on a deterministic task (math_tool, exact integer answers).

One SFT start (stages sft, eval; shared by every seed, as benchmarks/credit.py does: the seed changes the
RL sampling and task order, not the start); then at each seed the 16 cells of a 2^(5-1) fractional factorial over
aggregation x std scaling x clipping x truncation handling x prompt sampling (`design.py`) each train RL
from it (stages rl, eval) at the same steps and batch. Measured per cell: held-out success (the env's
verifier), the same held-out episodes re-scored by the independent verifier (`verifier2.py`), the lowest
and highest rollout entropy and mean episode length over all RL steps, and per-prompt outcome
histograms (groups with k of G successes) at the first and last RL step.

Gate (reference §10, Level 2): held-out pass rate rises at every one of >= 3 seeds (the mean over the
design's cells minus the SFT start, and the shipped-default cell alone), entropy and length stay within
the predeclared bounds in every cell and step, and the independent verifier confirms the gain (its own
gain at every seed, and its disagreement with the env's verifier under a limit)."""

from __future__ import annotations

import json
from pathlib import Path

from . import common, design, gates as G, verifier2

# the default recipe's model (1.15M parameters) on problems of difficulty <= 0.5 (one or two operations),
# 1500 demonstrations x 8 epochs, 80% of them using the tool: a pilot at seed 0 held out 0.370 after SFT
SIZES = ["run.threads=1", "env.train_tasks=1500", "env.heldout_tasks=100", "env.train_difficulty=[0.0, 0.5]",
         "env.heldout_difficulty=[0.0, 0.5]", "eval.tasks=100", "eval.samples=2", "eval.k=[1,2]",
         "rl.eval_every=0", "rl.checkpoint_every=1000"]
SFT = ["sft.demos=1500", "sft.epochs=8", "sft.expert_tool_rate=0.8", "stages=[sft, eval]"]
RL = ["stages=[rl, eval]", "rl.steps=10", "rl.prompts_per_step=8", "rl.group_size=8", "rl.lr=0.0005"]
QUICK = ["rl.steps=2", "eval.tasks=20", "env.heldout_tasks=20", "sft.demos=200", "sft.epochs=2",
         "model.tiny={hidden_size: 64, num_layers: 2, num_heads: 2, intermediate_size: 128, vocab_size: 320}"]
GROUP = 8


def run(args, gates: dict, root: Path, results: dict) -> tuple[str, list[G.Check]]:
    extra = QUICK if args.quick else []
    cells = design.cells()
    if args.cells:
        cells = cells[:args.cells]
    results.setdefault("cells", [])
    done = {(c["cell"], c["seed"]) for c in results["cells"]}
    ckpt = sft_start(args, root, results)
    for seed in args.seeds:
        for name, coded, overrides in cells:
            if (name, seed) in done:
                continue
            r, wall = common.train("default", root / f"{name}-s{seed}", f"run.seed={seed}", f"model.path={ckpt}",
                                   *SIZES, *RL, *extra, *overrides)
            m = common.rl_metrics(r)
            ent = [x["policy/entropy"] for x in m if "policy/entropy" in x]
            length = [x["length/mean"] for x in m if "length/mean" in x]
            row = {"cell": name, "coded": list(coded), "seed": seed, "success": common.last_eval(r)["eval/success"],
                   "v2": verifier2.audit(r.run_dir), "entropy_min": min(ent), "entropy_max": max(ent),
                   "length_min": min(length), "length_max": max(length), "steps": len(m), "wall_s": wall,
                   "hist": common.outcome_histogram(r.run_dir)}
            results["cells"].append(row)
            args.save()
            print(f"  {name} seed {seed}: held-out {row['success']:.3f} (v2 {row['v2']['v2_success']:.3f}), "
                  f"{wall:.0f}s", flush=True)
    return table(results, GROUP), checks(results, gates)


def sft_start(args, root: Path, results: dict, extra: tuple[str, ...] = ()) -> str:
    """The shared SFT checkpoint (trained once, at seed 0, under `extra` overrides too), its held-out success
    and independent re-score."""
    if "sft" not in results:
        done = root / "sft" / "summary.json"
        if done.exists() and "wall_s" in json.loads(done.read_text()):  # a finished start (e.g. Level 2's, for Level 5)
            summary = json.loads(done.read_text())
            results["sft"] = {"success": summary["evals"][-1]["eval/success"], "v2": verifier2.audit(root / "sft"),
                              "wall_s": summary["wall_s"], "checkpoint": str(root / "sft" / "checkpoints" / "step_0")}
        else:
            sft, wall = common.train("default", root / "sft", "run.seed=0", *SIZES, *SFT, *extra,
                                       *(QUICK if args.quick else []))
            results["sft"] = {"success": common.last_eval(sft)["eval/success"], "v2": verifier2.audit(sft.run_dir),
                              "wall_s": wall, "checkpoint": str(sft.checkpoint)}
        args.save()
    return results["sft"]["checkpoint"]


def table(results: dict, g: int = GROUP) -> str:
    cells = results["cells"]
    seeds = sorted({c["seed"] for c in cells})
    names = list(dict.fromkeys(c["cell"] for c in cells))
    by = {(c["cell"], c["seed"]): c for c in cells}
    lines = [f"{'cell (agg-std-clip-trunc-sampling)':<34} " + " ".join(f"{'s' + str(s):>6}" for s in seeds)
             + f" {'mean':>6} {'v2 mean':>7} {'entropy lo..hi':>15} {'length lo..hi':>14}  groups k/{g}=0..{g} (last step, seed {seeds[0]})"]
    sft = results["sft"]
    lines.append(f"{'(SFT start, shared)':<34} " + " ".join(f"{sft['success']:>6.3f}" for s in seeds)
                 + f" {sft['success']:>6.3f} {sft['v2']['v2_success']:>7.3f}")
    for n in names:
        rs = [by[n, s] for s in seeds if (n, s) in by]
        hist = by.get((n, seeds[0]), {}).get("hist", {}).get("last", {})
        lines.append(f"{n:<34} " + " ".join(f"{by[n, s]['success']:>6.3f}" if (n, s) in by else f"{'-':>6}" for s in seeds)
                     + f" {common.mean(r['success'] for r in rs):>6.3f} {common.mean(r['v2']['v2_success'] for r in rs):>7.3f}"
                     + f" {min(r['entropy_min'] for r in rs):>7.2f}..{max(r['entropy_max'] for r in rs):<6.2f}"
                     + f" {min(r['length_min'] for r in rs):>6.1f}..{max(r['length_max'] for r in rs):<6.1f}"
                     + f"  {common.fmt_hist({int(k): v for k, v in hist.items()}, g)}")
    full = [c for c in cells if c["seed"] == seeds[0]]
    if len(full) == len(design.cells()):  # main effects need the whole balanced design
        lines.append("\nmain effects on held-out success (mean at +1 minus mean at -1, averaged over seeds):")
        per_seed = []
        for s in seeds:
            rows = [c for c in cells if c["seed"] == s]
            if len(rows) == len(design.cells()):
                per_seed.append(design.main_effects([tuple(c["coded"]) for c in rows], [c["success"] for c in rows]))
        for f in design.FACTORS:
            lo, hi = design.LABELS[f]
            lines.append(f"  {f:<12} {hi} vs {lo}: {common.mean(e[f] for e in per_seed):+.3f}")
    return "\n".join(lines)


def checks(results: dict, gates: dict) -> list[G.Check]:
    lv = "level2"
    cells, sft = results["cells"], results["sft"]
    seeds = sorted({c["seed"] for c in cells})
    full = [s for s in seeds if sum(c["seed"] == s for c in cells) == len(design.cells())]
    gain = {s: common.mean(c["success"] for c in cells if c["seed"] == s) - sft["success"] for s in full}
    v2gain = {s: common.mean(c["v2"]["v2_success"] for c in cells if c["seed"] == s) - sft["v2"]["v2_success"] for s in full}
    ref = design.cells()[0][0]  # every factor at the shipped default
    refgain = {s: c["success"] - sft["success"] for c in cells for s in [c["seed"]] if c["cell"] == ref}
    lo = lambda d: min(d.values()) if d else None  # noqa: E731
    return [
        G.at_least("seeds with the whole design run", len(full), G.threshold(gates, lv, "seeds_min")),
        G.at_least("held-out gain, mean over cells, worst seed", lo(gain), G.threshold(gates, lv, "heldout_gain_min"),
                   "per seed " + " ".join(f"{v:+.3f}" for v in gain.values())),
        G.at_least(f"held-out gain, default cell {ref}, worst seed", lo(refgain), G.threshold(gates, lv, "heldout_gain_min"),
                   "per seed " + " ".join(f"{v:+.3f}" for v in refgain.values())),
        G.within("lowest entropy over cells and steps (nats)", min((c["entropy_min"] for c in cells), default=None),
                 G.threshold(gates, lv, "entropy")),
        G.within("highest entropy over cells and steps (nats)", max((c["entropy_max"] for c in cells), default=None),
                 G.threshold(gates, lv, "entropy")),
        G.within("shortest mean episode length (tokens)", min((c["length_min"] for c in cells), default=None),
                 G.threshold(gates, lv, "length")),
        G.within("longest mean episode length (tokens)", max((c["length_max"] for c in cells), default=None),
                 G.threshold(gates, lv, "length")),
        G.at_least("independent verifier's gain, worst seed", lo(v2gain), G.threshold(gates, lv, "v2_gain_min"),
                   "per seed " + " ".join(f"{v:+.3f}" for v in v2gain.values())),
        G.at_most("verifier disagreement, worst cell", max((c["v2"]["disagreement"] for c in cells), default=None),
                  G.threshold(gates, lv, "v2_disagreement_max")),
    ]
