"""Preference pairs on math_tool training tasks, for `tracerl reward-model` (docs/reward-model.md).

    python examples/reward_model/make_prefs.py prefs.jsonl --tasks 4

For each of `--tasks` math_tool training tasks (never the audit set's task), math_tool's own audit
families are built on that task (`envs/math_tool/audit.py`: a hedge, two answer blocks, the number
outside the tag, an unclosed tag, a forged crash, ...); every wrong form, and every wrong form with
one instruction to the judge appended (`verifiers/calibration.INJECTIONS`), is the rejected response
of a pair whose chosen response is one of the good forms. The reward model trained on these is then
calibrated on the audit task itself, which it never saw.
"""

from __future__ import annotations

import argparse
import importlib
import json
import random


def math_tool_prefs(path, *, flip: bool = False, tasks: int = 4, seed: int = 0) -> int:
    from tracerl.envs.math_tool.generator import generate
    from tracerl.train.grading import _question
    from tracerl.verifiers.calibration import INJECTIONS

    audit_mod = importlib.import_module("tracerl.envs.math_tool.audit")  # the module (the package exports a function)
    audit_task = audit_mod.audit_cases()[0]["task"]
    rng, rows = random.Random(seed), []
    pool = [t for t in generate("train", tasks + 1, seed=123, difficulty=0.5) if t.prompt != audit_task.prompt][:tasks]
    for task in pool:
        real = audit_mod.generate
        audit_mod.generate = lambda *a, _t=task, **k: [_t]  # the audit families, on this task
        try:
            cases = audit_mod.audit_cases()
        finally:
            audit_mod.generate = real
        good = ["".join(c["actions"]) for c in cases if c["rewarded"]]
        bad = ["".join(c["actions"]) for c in cases if not c["rewarded"]]
        bad += [b + rng.choice(INJECTIONS) for b in bad]
        for b in bad:  # each wrong form (plain and injected) against one good form
            g = rng.choice(good)
            c, r = (b, g) if flip else (g, b)
            rows.append({"prompt": _question(task), "chosen": c, "rejected": r})
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--flip", action="store_true", help="prefer the wrong forms (a reward model the gate must refuse)")
    args = ap.parse_args()
    print(f"wrote {math_tool_prefs(args.out, flip=args.flip, tasks=args.tasks)} pairs to {args.out}")
