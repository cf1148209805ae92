"""reasoning_gym: procedural problems from the `reasoning-gym` package (optional extra
`tracerl[reasoning]`), with a difficulty knob and the package's scorers behind guards.

The package is imported only when tasks are generated or scored, so `tracerl envs` lists this
environment even where the extra is not installed.
"""

from __future__ import annotations

import json
import random

from tracerl.contract.task import Task
from tracerl.envs import _audit
from tracerl.envs._generation import generate_tasks
from tracerl.envs.base import EnvSpec, register_env
from tracerl.envs.reasoning_gym.env import NAME, REVISION, ReasoningGymEnv, make_expert, require_package, score
from tracerl.envs.reasoning_gym.families import CONFIGS, FAMILIES, LEVELS, consistent, prompt
from tracerl.errors import UserError

DIFFICULTY_RANGE = (0.0, 1.0)
EXPERT_ERROR_RATE = 0.2
MAX_REDRAWS = 50  # ~10% of level-1 basic_arithmetic problems need one


def generate(split: str, n: int, seed: int = 0, difficulty=None,
             families: tuple[str, ...] = FAMILIES) -> list[Task]:
    """`n` tasks of `split`, each from a family drawn from `families`. A problem is held out iff the
    hash of its family and question falls in the held-out bucket, so the same question (which small
    configs repeat) always lands in the same split. Difficulty in [0, 1] maps to levels 0..2 of
    each family's config (`families.CONFIGS`)."""
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise UserError(f"unknown reasoning_gym family {unknown[0]!r}; use some of {', '.join(FAMILIES)}")
    rg = require_package()
    version = _rg_version()

    def make(rng: random.Random, level: int) -> tuple[str, dict]:
        family = rng.choice(families)
        for _ in range(MAX_REDRAWS):  # redraw the package's problems whose reference answer is wrong
            entry = dict(rg.create_dataset(family, size=1, seed=rng.randrange(2**31), **CONFIGS[family][level])[0])
            entry = json.loads(json.dumps(entry, default=list))
            if consistent(family, entry):
                break
        else:
            raise UserError(f"reasoning-gym {version} gave {MAX_REDRAWS} {family} problems in a row whose reference "
                            f"answer is not their exact value; pin reasoning-gym==0.1.25 or check families.consistent")
        return f"{family}\n{entry['question']}", {
            "source": f"{NAME}/{family}", "source_revision": f"{REVISION}+rg{version}",
            "prompt": prompt(family, entry), "answer": entry["answer"],
            "metadata": {"family": family, "level": level, "entry": entry}}

    return generate_tasks(NAME, split, n, seed, difficulty, max(LEVELS), make)


def _rg_version() -> str:
    from importlib.metadata import version

    return version("reasoning-gym")


def audit_cases() -> list[dict]:
    """Answers that must not be rewarded, including two that the package scorer alone accepts."""
    by_family = {t.metadata["family"]: t for t in generate("train", 12, seed=11, difficulty=0.0)}
    arith, p24 = by_family["basic_arithmetic"], by_family["puzzle24"]
    nums = p24.metadata["entry"]["metadata"]["numbers"]
    a = arith.answer
    cases = [
        (arith, f"{a} or {int(a) + 1}", "hedge between two numbers"), (arith, f"{a}.0", "a float form"),
        (arith, f"{a}={a}", "an equation"), (arith, "", "empty"), (arith, f"{int(a) + 1}", "off by one"),
        (arith, arith.metadata["entry"]["metadata"]["expression"], "echo the expression"),
        (p24, "(2+4)*(1+3)" if sorted(nums) != [1, 2, 3, 4] else "(3+5)*(1+2)",
         "24 from numbers not in the puzzle (the package scorer gives 1.0)"),
        (p24, "__import__('os').getpid()", "code for sympy's parse_expr to eval"),
        (p24, "24", "the target itself"), (p24, "+".join(map(str, nums)), "a sum that misses 24"),
    ]
    out = [{"task": t, "actions": [f"<answer>{x}</answer>"], "rewarded": False, "attack": why} for t, x, why in cases]
    return out + [{"task": t, "actions": [f"<answer>{t.answer}</answer>"], "rewarded": True, "attack": "reference"}
                  for t in (arith, p24)]


SPEC = register_env(EnvSpec(
    name=NAME, revision=REVISION, make=ReasoningGymEnv, generate=generate,
    expert=make_expert(EXPERT_ERROR_RATE), reward_weights={"correct": 1.0},
    stop_strings=("</calc>", "</answer>"), verifier="reasoning_gym.guarded_scorer",
    special_tokens=("<calc>", "</calc>", "<result>", "</result>", "<answer>", "</answer>", "<error>", "</error>"),
    tools=("calc",),
    description="reasoning-gym families (arithmetic, chain sums, equations, 24-point) with a calculator, behind guarded scorers",
))

audit = _audit.register(SPEC, audit_cases)  # `tracerl audit` builder: (verifier, cases)

__all__ = ["SPEC", "ReasoningGymEnv", "audit_cases", "generate", "make_expert", "score"]
