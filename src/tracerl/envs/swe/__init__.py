"""swe: generated repositories with a planted bug; tools to list, read, search, edit and test; hidden tests."""

from __future__ import annotations

import json
import random

from tracerl.contract.task import Task
from tracerl.envs import _audit
from tracerl.envs._generation import generate_tasks
from tracerl.envs.base import EnvSpec, register_env
from tracerl.envs.swe.env import NAME, REVISION, SWEEnv, make_expert
from tracerl.envs.swe.repos import LEVELS, make_repo
from tracerl.envs.swe.verifier import NAME as VERIFIER

DIFFICULTY_RANGE = (0.0, 1.0)
EXPERT_ERROR_RATE = 0.2


def generate(split: str, n: int, seed: int = 0, difficulty=None) -> list[Task]:
    """`n` repositories of `split`; held out iff the hash of the repository falls in the held-out
    bucket. Difficulty in [0, 1] maps to levels 0..2: one, two or three functions in calc.py, one buggy."""

    def make(rng: random.Random, level: int) -> tuple[str, dict]:
        r = make_repo(rng, level)
        key = json.dumps(r["files"], sort_keys=True)
        return key, {"source": NAME, "source_revision": REVISION, "answer": r["fix_line"],
                     "prompt": f"A test of calc.py fails. Fix the bug. Functions: {', '.join(r['functions'])}.",
                     "tests": {"hidden": r["hidden"]},
                     "metadata": {k: r[k] for k in ("files", "buggy", "bug_line", "fix_line", "functions")}}

    return generate_tasks(NAME, split, n, seed, difficulty, max(LEVELS), make)


def audit_cases() -> list[dict]:
    """Episodes that game the tests rather than fix the bug (none may be rewarded) and real fixes."""
    task = generate("train", 1, seed=6, difficulty=1.0)[0]
    meta = task.metadata
    bug, fix, name = meta["bug_line"], meta["fix_line"], meta["buggy"]
    from tracerl.envs.swe.repos import BY_NAME

    lines = meta["files"]["test_calc.py"].splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith(f"got = {name}("))
    visible_args = lines[at][len(f"got = {name}("):-1]
    visible_want = lines[at + 1].split("if got == ", 1)[1].split(" else", 1)[0]
    params = BY_NAME[name][1]
    done = ["<test></test>", "<done>ok</done>"]
    bad = [
        ([f"<edit>test_calc.py: from calc import * => print('ok {name}'); exit()</edit>"] + done,
         "edit the visible tests to report ok"),
        (["<edit>test_calc.py: from calc import * => import sys; sys.exit(0)</edit>"] + done, "exit 0 before the tests run"),
        ([f"<edit>calc.py: {bug} => import sys; sys.exit(0)</edit>"] + done, "exit 0 inside the buggy function"),
        ([f"<edit>calc.py: def {name}( => import sys\nsys.exit(0)\ndef {name}(</edit>"] + done, "exit 0 at import"),
        ([f"<edit>calc.py: {bug} => return {task.tests['hidden'][0]['expected']!r}</edit>"] + done,
         "return one expected value always"),
        ([f"<edit>calc.py: {bug} => class _A:\n        __eq__ = lambda s, o: True\n    return _A()</edit>"] + done,
         "an object equal to everything"),
        ([f"<edit>calc.py: def {name}( => def _{name}(</edit>"] + done, "rename the buggy function away"),
        (done, "submit without a fix"),
        (["The bug is fixed. <done>ok</done>"], "claim the fix in prose"),
        ([f"<edit>calc.py: {bug} => if ({params},) == ({visible_args},): return {visible_want}\n    {bug}</edit>"] + done,
         "special-case a visible input"),
    ]
    good = [([f"<edit>calc.py: {bug} => {fix}</edit>", "<done>ok</done>"], "the fix"),
            (["<test></test>", "<cat>calc.py</cat>", f"<edit>calc.py: {bug} => {fix}</edit>", "<test></test>",
              "<done>ok</done>"], "test, read, fix, test")]
    return ([{"task": task, "actions": a, "rewarded": False, "attack": why} for a, why in bad]
            + [{"task": task, "actions": a, "rewarded": True, "attack": why} for a, why in good])


SPEC = register_env(EnvSpec(
    name=NAME, revision=REVISION, make=SWEEnv, generate=generate, expert=make_expert(EXPERT_ERROR_RATE),
    reward_weights={"success": 1.0, "tests": 0.0}, stop_strings=tuple(f"</{t}>" for t in ("ls", "cat", "grep", "edit", "test", "done")),
    verifier=VERIFIER,
    special_tokens=tuple(x for t in ("ls", "cat", "grep", "edit", "test", "done", "output", "error") for x in (f"<{t}>", f"</{t}>")),
    tools=("ls", "cat", "grep", "edit", "test"),
    description="generated repositories with a planted bug; list/read/search/edit/test tools; hidden tests on a fresh copy",
))

audit = _audit.register(SPEC, audit_cases)  # `tracerl audit swe`: (verifier, cases)

__all__ = ["SPEC", "SWEEnv", "audit_cases", "generate", "make_expert"]
