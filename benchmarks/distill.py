"""MOPD vs GRPO from one SFT start: steps until the student reaches 90 % of its teacher's held-out success.

    python benchmarks/distill.py --l2 /work/bench/l2 [--seeds 0 1 2] [--steps 30] [--every 3] [--root DIR]
    python benchmarks/distill.py --from-runs DIR      # the table of the runs already in DIR
    python benchmarks/distill.py --recipe gateway_agent --set gateway.agent=null \
        --start 'RUNS/s{seed}/checkpoints/step_0' --teacher 'TEACHERS/s{seed}/checkpoints/step_30' --root DIR

Inputs per seed S, from the Level-2 benchmark (`benchmarks/algorithms.py`, default recipe on math_tool):
the SFT checkpoint `<l2>/sN/sft-seedS/checkpoints/step_0` (the student's start) and the GRPO run trained
from it, `<l2>/sN/grpo-seedS/checkpoints/step_*` (the teacher; same tokenizer). Per seed it evaluates the
teacher and the start, then trains `grpo` and `mopd` (pure distillation, `roles.teachers` = that
teacher) from the start with the default recipe's sizes (or `--recipe`'s, with `--start` / `--teacher` naming
any student start and teacher per seed: they must share a tokenizer), `--steps` RL steps, a held-out evaluation every
`--every` steps and at the end. `--tag T` names a variant's rows `<algo>@T` (its `--set` overrides apply to
them), so rows at other learning rates or sizes join one root and one table. All evaluations use one cheaper
protocol (`--eval-tasks` × `--eval-samples`, the same tasks and seeds for every model of a seed). A row's
steps-to-target is the first evaluated step whose held-out success is ≥ `--frac` × the teacher's; "—" if none.
Finished runs are not rerun; an unfinished one is moved aside (`<dir>.unfinished`) and started again;
`--from-runs` shows unfinished runs with the evaluations they reached, marked.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

MOPD = "rl.algorithm={name: mopd, ratio_low: 0.5, ratio_high: 2.0, aggregation: token}"
# mopd keeps truncated episodes in the loss: the teacher's token advantage does not need an outcome, and with
# the default recipe's `truncation: mask` the student's drift into over-long answers is never corrected
# (measured at seed 0: truncation 0 → 82 % by step 11, held-out 0.335 → 0.09; row `mopd_mask`)
# grpo spelled out (the default recipe's own settings), so a row under `--recipe mopd` trains GRPO too
GRPO = ["rl.algorithm={name: grpo, clip_low: 0.2, clip_high: 0.28, aggregation: token}", "rl.truncation=mask",
        "roles.teachers=[]"]
ALGOS = {"grpo": GRPO, "mopd": [MOPD, "rl.truncation=keep"], "mopd_mask": [MOPD],
         # the teacher's token advantage plus the GRPO outcome advantage (Nemotron's mixing, outcome_coef 1)
         "mopd_outcome": [MOPD, "rl.truncation=keep", "rl.algorithm.outcome_coef=1.0"],
         # plus the forward KL to the teacher's top-16 distribution at every token (GKD, beta 0)
         "mopd_support": [MOPD, "rl.truncation=keep", "rl.algorithm.support=16"],
         # that forward KL alone, without the sampled-token (reverse-KL) term
         "mopd_forward": [MOPD, "rl.truncation=keep", "rl.algorithm.support=16", "rl.algorithm.reverse_coef=0"],
         # distil only the turns up to each trajectory's first failed action (after_error 0)
         "mopd_error_free": [MOPD, "rl.truncation=keep", "rl.algorithm.after_error=0"]}


def _train(a, args: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "tracerl.cli", "train", a.recipe, *args, *a.set], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit(f"run failed: {' '.join(args)}\n{proc.stderr[-2000:]}")


def _fresh(run_dir: Path) -> Path:
    """`run_dir`, with an unfinished run there (a killed benchmark) moved aside to `<name>.unfinished`."""
    if run_dir.exists():
        aside = run_dir.with_name(run_dir.name + ".unfinished")
        shutil.rmtree(aside, ignore_errors=True)
        run_dir.rename(aside)
    return run_dir


def _common(a, seed: int) -> list[str]:
    return [f"run.seed={seed}", f"run.threads={a.threads}", "run.progress=false", f"eval.tasks={a.eval_tasks}",
            f"eval.samples={a.eval_samples}", f"eval.k=[1, {a.eval_samples}]", "rl.checkpoint_every=0"]


def teacher_path(l2: Path, seed: int) -> Path:
    steps = sorted((l2 / f"s{seed}" / f"grpo-seed{seed}" / "checkpoints").glob("step_*"), key=lambda p: int(p.name[5:]))
    if not steps:
        raise SystemExit(f"no GRPO checkpoint under {l2}/s{seed}/grpo-seed{seed}/checkpoints; run benchmarks/algorithms.py first")
    return steps[-1]


def curve(run_dir: Path) -> list[tuple[int, float]]:
    """(step, held-out success) of a run: its evaluations during RL and the one after it."""
    pts = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        if m.get("stage") == "rl" and "eval/success" in m:
            pts[int(m["step"])] = m["eval/success"]
    for e in json.loads((run_dir / "summary.json").read_text())["evals"]:
        pts[int(e["step"])] = e["eval/success"]
    return sorted(pts.items())


def finished(run_dir: Path) -> bool:
    """A run that got to its end (its summary.json is rewritten at each evaluation, `wall_s` added last)."""
    f = run_dir / "summary.json"
    return f.exists() and "wall_s" in json.loads(f.read_text())


def evaluate(a, seed: int, model: Path, run_dir: Path) -> float:
    if not finished(run_dir):
        _train(a, [f"run.dir={_fresh(run_dir)}", f"model.path={model}", "stages=[eval]", *_common(a, seed)])
    return json.loads((run_dir / "summary.json").read_text())["evals"][-1]["eval/success"]


def run_algo(a, seed: int, algo: str, start: Path, teacher: Path, run_dir: Path) -> None:
    if finished(run_dir):
        return
    extra = [f"roles.teachers=[{{name: teacher, path: {teacher}}}]"] if algo.startswith("mopd") else []
    _train(a, [f"run.dir={_fresh(run_dir)}", f"model.path={start}", "stages=[rl, eval]", f"rl.steps={a.steps}",
            f"rl.eval_every={a.every}", f"rl.prompts_per_step={a.prompts}", *_common(a, seed), *ALGOS[algo], *extra])


def first_at(pts: list[tuple[int, float]], target: float) -> int | None:
    return next((s for s, v in pts if s > 0 and v >= target), None)


def collect(root: Path, frac: float) -> dict:
    out = {}
    for sd in sorted(root.glob("seed*")):
        seed = int(sd.name[4:])
        try:
            teacher = json.loads((sd / "teacher-eval" / "summary.json").read_text())["evals"][-1]["eval/success"]
            start = json.loads((sd / "start-eval" / "summary.json").read_text())["evals"][-1]["eval/success"]
        except FileNotFoundError:
            continue
        row = {"teacher": teacher, "start": start, "target": frac * teacher}
        for name in rows(sd):  # an unfinished run (stopped early) is shown with the evaluations it got to
            pts = [(0, start)] + curve(sd / name)
            row[name] = {"curve": pts, "steps_to_target": first_at(pts, frac * teacher),
                         "finished": finished(sd / name)}
        out[seed] = row
    return out


def _is_row(name: str) -> bool:
    """An algorithm's row (`grpo`) or a tagged variant of one (`grpo@lr1e-3`); not a run moved aside."""
    return name.split("@")[0] in ALGOS and not name.endswith(".unfinished")


def _order(name: str) -> tuple[int, str]:
    """Rows in ALGOS order, each algorithm's tagged variants after it."""
    return list(ALGOS).index(name.split("@")[0]), name


def rows(seed_dir: Path) -> list[str]:
    """The row directories of a seed: each algorithm's, then its tagged variants (`<algo>@<tag>`)."""
    return sorted((d.name for d in seed_dir.iterdir() if (d / "summary.json").exists() and _is_row(d.name)), key=_order)


def table(res: dict, frac: float) -> str:
    algos = sorted({a for r in res.values() for a in r if _is_row(a)}, key=_order)
    widths = [max(15, len(a) + 6) for a in algos]
    lines = [f"seed  teacher  start  target({frac:.0%})  "
             + "  ".join(f"{a + ' steps':>{w}}" for a, w in zip(algos, widths))]
    for seed, r in sorted(res.items()):
        cells = [(("—" if r[a]["steps_to_target"] is None else str(r[a]["steps_to_target"]))
                  + ("" if r[a]["finished"] else f" (to {r[a]['curve'][-1][0]})")) if a in r else "(not run)"
                 for a in algos]
        lines.append(f"{seed:>4}  {r['teacher']:>7.3f}  {r['start']:>5.3f}  {r['target']:>11.4f}  "
                     + "  ".join(f"{c:>{w}}" for c, w in zip(cells, widths)))
    lines.append("held-out success at each evaluated step (step:success):")
    for seed, r in sorted(res.items()):
        for a in algos:
            if a in r:
                name = f"{a:<{max(12, *map(len, algos))}}"
                lines.append(f"  seed {seed} {name} " + " ".join(f"{s}:{v:.3f}" for s, v in r[a]["curve"])
                             + ("" if r[a]["finished"] else "  (unfinished)"))
    for a in algos:
        finals = [r[a]["curve"][-1][1] for r in res.values() if a in r and r[a]["finished"]]
        if finals:
            lines.append(f"{a}: mean held-out at its last step {statistics.mean(finals):.3f} over {len(finals)} "
                         "finished seed(s)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--l2", default="/work/bench/l2", help="root of a Level-2 benchmark (sN/sft-seedN, sN/grpo-seedN)")
    ap.add_argument("--recipe", default="default", help="the recipe both rows train with (its sizes, its env)")
    ap.add_argument("--start", default=None, help="student start per seed, '{seed}' filled in (default: from --l2)")
    ap.add_argument("--teacher", default=None, help="teacher checkpoint per seed, '{seed}' filled in (default: from --l2)")
    ap.add_argument("--set", nargs="*", default=[], help="extra overrides for every run (e.g. gateway.agent=null)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--algos", nargs="+", choices=list(ALGOS), default=["mopd", "grpo"])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--every", type=int, default=3, help="held-out evaluation every N RL steps")
    ap.add_argument("--prompts", type=int, default=16, help="rl.prompts_per_step (group size stays 8)")
    ap.add_argument("--eval-tasks", type=int, default=100)
    ap.add_argument("--eval-samples", type=int, default=2)
    ap.add_argument("--tag", default="", help="name this variant's rows <algo>@TAG (with its --set overrides)")
    ap.add_argument("--frac", type=float, default=0.9, help="target: this fraction of the teacher's held-out success")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--root", default="runs/bench-distill")
    ap.add_argument("--from-runs", default=None, help="print the table of the runs in this root and exit")
    a = ap.parse_args()
    if a.from_runs:
        print(table(collect(Path(a.from_runs), a.frac), a.frac))
        return
    root, l2 = Path(a.root), Path(a.l2)
    for seed in a.seeds:
        sd = root / f"seed{seed}"
        start = (Path(a.start.format(seed=seed)) if a.start
                 else l2 / f"s{seed}" / f"sft-seed{seed}" / "checkpoints" / "step_0")
        teacher = Path(a.teacher.format(seed=seed)) if a.teacher else teacher_path(l2, seed)
        t = evaluate(a, seed, teacher, sd / "teacher-eval")
        s = evaluate(a, seed, start, sd / "start-eval")
        print(f"seed {seed}: teacher {teacher} held-out {t:.3f}; start {s:.3f}; target {a.frac * t:.3f}", flush=True)
        for algo in a.algos:
            row = sd / (f"{algo}@{a.tag}" if a.tag else algo)
            run_algo(a, seed, algo, start, teacher, row)
            print(f"seed {seed} {row.name}: {curve(row)}", flush=True)
    print(table(collect(root, a.frac), a.frac))


if __name__ == "__main__":
    main()
