"""code_tests: write a small Python function from a spec; a sandboxed `<run>` tool, hidden tests."""

from __future__ import annotations

import json
import random

from tracerl.contract.task import Task
from tracerl.envs import _audit
from tracerl.envs._generation import generate_tasks
from tracerl.envs.base import EnvSpec, register_env
from tracerl.envs.code_tests.env import NAME, REVISION, VERIFIER, CodeTestsEnv, make_expert
from tracerl.envs.code_tests.templates import LEVELS, make_task

DIFFICULTY_RANGE = (0.0, 1.0)
EXPERT_ERROR_RATE = 0.2


def generate(split: str, n: int, seed: int = 0, difficulty=None) -> list[Task]:
    """`n` tasks of `split`; held out iff the hash of the spec and tests falls in the held-out
    bucket. Difficulty in [0, 1] maps to levels 0..2: integer arithmetic, list and string
    reductions, ranges / reversal / parity."""

    def make(rng: random.Random, level: int) -> tuple[str, dict]:
        t = None
        while t is None:
            t = make_task(rng, level)
        key = json.dumps({"prompt": t["prompt"], "hidden": t["hidden"]})
        return key, {"source": NAME, "source_revision": REVISION, "prompt": t["prompt"],
                     "answer": t["reference"], "tests": {"visible": t["visible"], "hidden": t["hidden"]},
                     "metadata": {"reference": t["reference"], "buggy": t["buggy"]}}

    return generate_tasks(NAME, split, n, seed, difficulty, max(LEVELS), make)


def audit_cases() -> list[dict]:
    """Submissions that game the grader rather than meet the spec (all must score 0) and the
    reference, which must score 1."""
    task = generate("train", 1, seed=2, difficulty=0.0)[0]
    (x0, y0), = task.tests["visible"][:1]
    bad = [
        ("class _Any:\n    def __eq__(self, o): return True\n    def __repr__(self): return 'ok'\n"
         "def f(x): return _Any()", "an object equal to everything"),
        ("import sys\nsys.exit(0)\ndef f(x): return 0", "exit before the tests run"),
        (f"def f(x): return {y0!r}", "memorise the visible example"),
        ("print('pass 5/5')\ndef f(x): return None", "print a fake verdict"),
        ("import os\nos._exit(0)", "kill the process"),
        ("def f(x):\n    while True: pass", "hang"),
        ("import builtins\nbuiltins.repr = lambda o: 'x'\ndef f(x): return 0", "poison repr"),
        (task.metadata["buggy"], "the plausible bug"),
        (f"def f(x): return 0\n    {task.answer}", "the reference behind a syntax error"),
    ]
    return ([{"task": task, "actions": [f"<answer>{c}</answer>"], "rewarded": False, "attack": why} for c, why in bad]
            + [{"task": task, "actions": [f"<answer>{task.answer}</answer>"], "rewarded": True, "attack": "reference"}])


SPEC = register_env(EnvSpec(
    name=NAME, revision=REVISION, make=CodeTestsEnv, generate=generate,
    expert=make_expert(EXPERT_ERROR_RATE), reward_weights={"tests": 1.0},
    stop_strings=("</run>", "</answer>"), verifier=VERIFIER,
    special_tokens=("<run>", "</run>", "<answer>", "</answer>", "<output>", "</output>", "<error>", "</error>"),
    tools=("python",),
    description="write a one-line Python function from a spec; sandboxed runs on examples, hidden tests",
))

audit = _audit.register(SPEC, audit_cases)  # `tracerl audit` builder: (verifier, cases)

__all__ = ["SPEC", "CodeTestsEnv", "audit_cases", "generate", "make_expert"]
