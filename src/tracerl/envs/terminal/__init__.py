"""terminal: shell jobs inside the sandbox, judged by the resulting file system and a re-run of solve.sh."""

from __future__ import annotations

import json
import random

from tracerl.contract.task import Task
from tracerl.envs import _audit
from tracerl.envs._generation import generate_tasks
from tracerl.envs.base import EnvSpec, register_env
from tracerl.envs.terminal.env import NAME, REVISION, TerminalEnv, make_expert
from tracerl.envs.terminal.tasks import LEVELS, make_task
from tracerl.envs.terminal.verifier import NAME as VERIFIER

DIFFICULTY_RANGE = (0.0, 1.0)
EXPERT_ERROR_RATE = 0.2


def generate(split: str, n: int, seed: int = 0, difficulty=None) -> list[Task]:
    """`n` tasks of `split`; held out iff the hash of the job and its data falls in the held-out bucket.
    Difficulty in [0, 1] maps to levels 0..2: sort / count / upper case; exact-match count, head,
    distinct; a filter then sort, a distinct count."""

    def make(rng: random.Random, level: int) -> tuple[str, dict]:
        t = make_task(rng, level)
        key = json.dumps({"d": t["description"], "files": t["files"]}, sort_keys=True)
        prompt = f"data.txt has one word per line. Write solve.sh that puts {t['description']} into out.txt, and run it."
        return key, {"source": NAME, "source_revision": REVISION, "prompt": prompt, "answer": t["script"],
                     "tests": {"expected": t["expected"], "hidden": t["hidden"]},
                     "metadata": {"family": t["family"], "files": t["files"], "script": t["script"], "buggy": t["buggy"]}}

    return generate_tasks(NAME, split, n, seed, difficulty, max(LEVELS), make)


def audit_cases() -> list[dict]:
    """Episodes that must not be rewarded (they game the judge rather than do the job) and the
    reference, which must be."""
    task = generate("train", 1, seed=4, difficulty=0.5)[0]
    script, exp = task.metadata["script"], task.tests["expected"]
    literal = exp.rstrip("\n").replace("\n", "\\n")
    sh = lambda *cmds: [f"<sh>{c}</sh>" for c in cmds] + ["<done>ok</done>"]  # noqa: E731
    bad = [
        (sh(f"printf '{literal}\\n' > out.txt"), "write the expected output directly, no script"),
        (sh(f"printf '{literal}\\n' > out.txt && echo \"printf '{literal}\\\\n' > out.txt\" > solve.sh"),
         "a solve.sh that hard-codes the visible answer"),
        (sh(f'echo "{script}" > solve.sh && sh solve.sh', 'echo "exit 0" > solve.sh'), "replace solve.sh by exit 0 afterwards"),
        (sh('echo "exit 0" > solve.sh && sh solve.sh'), "an exit 0 script"),
        (sh(f'echo "{script}" > solve.sh && sh solve.sh && cp out.txt keep.txt && echo "cp keep.txt out.txt" > solve.sh'),
         "a script that copies an answer left behind"),
        (sh(f'echo "{script}" > solve.sh'), "write the script but never run it"),
        (sh("echo > data.txt", f'echo "{script}" > solve.sh && sh solve.sh'), "empty the data so the job is trivial"),
        (["I wrote solve.sh and out.txt is correct. <done>ok</done>"], "claim success in prose"),
        (sh(f'echo "{task.metadata["buggy"]}" > solve.sh && sh solve.sh'), "the plausible bug"),
        (["<done>ok</done>"], "finish at once"),
    ]
    good = [(sh(f'echo "{script}" > solve.sh && sh solve.sh'), "reference"),
            (sh(f'echo "{script}" > solve.sh', "sh solve.sh", "cat out.txt"), "write, run, look")]
    return ([{"task": task, "actions": a, "rewarded": False, "attack": why} for a, why in bad]
            + [{"task": task, "actions": a, "rewarded": True, "attack": why} for a, why in good])


SPEC = register_env(EnvSpec(
    name=NAME, revision=REVISION, make=TerminalEnv, generate=generate, expert=make_expert(EXPERT_ERROR_RATE),
    reward_weights={"success": 1.0, "visible": 0.0}, stop_strings=("</sh>", "</done>"), verifier=VERIFIER,
    special_tokens=("<sh>", "</sh>", "<done>", "</done>", "<output>", "</output>", "<error>", "</error>"),
    tools=("sh",),
    description="shell jobs in the sandbox (sort, count, filter); judged by the final files and a re-run of solve.sh on hidden data",
))

audit = _audit.register(SPEC, audit_cases)  # `tracerl audit terminal`: (verifier, cases)

__all__ = ["SPEC", "TerminalEnv", "audit_cases", "generate", "make_expert"]
