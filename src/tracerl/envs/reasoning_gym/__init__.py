"""reasoning_gym: procedural problems from the `reasoning-gym` package (optional extra
`tracerl[reasoning]`), with a difficulty knob and the package's scorers behind guards.

The package is imported only when tasks are generated or scored, so `tracerl envs` lists this
environment even where the extra is not installed.
"""

from __future__ import annotations

import hashlib
import json
import random

from tracerl.envs.base import EnvSpec, register_env
from tracerl.envs.reasoning_gym.env import NAME, REVISION, ReasoningGymEnv, dataset, make_expert, score
from tracerl.envs.reasoning_gym.families import FAMILIES, LEVELS, prompt
from tracerl.errors import UserError
from tracerl.tasks.task import SPLITS, Task

DIFFICULTY_RANGE = (min(LEVELS), max(LEVELS))
EXPERT_ERROR_RATE = 0.2
_CHUNK = 64


def _split_of(key: str) -> str:
    return "heldout" if int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 5 == 0 else "train"


def generate(split: str, n: int, seed: int = 0, difficulty: float | None = None,
             families: tuple[str, ...] = FAMILIES) -> list[Task]:
    """`n` tasks of `split`, rotating through `families`. A problem is held out iff the hash of its
    family and question falls in the held-out bucket, so the same question (which small configs
    repeat) always lands in the same split."""
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; use one of {SPLITS}")
    if difficulty is not None and round(difficulty) not in LEVELS:
        raise UserError(f"reasoning_gym difficulty {difficulty!r} is out of range; use {DIFFICULTY_RANGE}")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise UserError(f"unknown reasoning_gym family {unknown[0]!r}; use some of {', '.join(FAMILIES)}")
    pick = random.Random(f"{NAME}:{seed}:levels")
    pools: dict[tuple[str, int], list[dict]] = {}
    cursor: dict[tuple[str, int], int] = {}
    tasks: list[Task] = []
    seen: set[str] = set()
    draws = 0
    while len(tasks) < n:
        if draws > 100 * n + 1000:
            raise UserError(f"reasoning_gym has only {len(tasks)} distinct {split} tasks "
                            f"at difficulty {difficulty}; ask for fewer")
        family = families[draws % len(families)]
        draws += 1
        level = round(difficulty) if difficulty is not None else pick.choice(LEVELS)
        k = (family, level)
        if cursor.get(k, 0) >= len(pools.get(k, [])):
            chunk = len(pools.get(k, [])) // _CHUNK
            family_salt = int(hashlib.sha256(family.encode()).hexdigest()[:6], 16)
            ds = dataset(family, level, seed=family_salt + seed * 1000 + chunk, size=_CHUNK)
            pools.setdefault(k, []).extend(dict(ds[j]) for j in range(_CHUNK))
        entry = pools[k][cursor.get(k, 0)]
        cursor[k] = cursor.get(k, 0) + 1
        key = f"{family}\n{entry['question']}"
        if _split_of(key) != split or key in seen:
            continue
        seen.add(key)
        tasks.append(Task(
            id=f"{NAME}-{hashlib.sha256(key.encode()).hexdigest()[:12]}", source=f"{NAME}/{family}",
            source_revision=f"{REVISION}+rg{_rg_version()}", split=split, prompt=prompt(family, entry),
            answer=entry["answer"], difficulty=float(level),
            metadata={"family": family, "level": level, "entry": json.loads(json.dumps(entry, default=list))},
        ))
    return tasks


def _rg_version() -> str:
    from importlib.metadata import version

    return version("reasoning-gym")


def audit_cases() -> list[dict]:
    """Answers that must not be rewarded, including the two the package scorer alone accepts."""
    by_family = {t.metadata["family"]: t for t in generate("train", 8, seed=11, difficulty=0)}
    arith, p24 = by_family["basic_arithmetic"], by_family["puzzle24"]
    nums = p24.metadata["entry"]["metadata"]["numbers"]
    a = arith.answer
    cases = [
        (arith, f"{a} or {int(a) + 1}"), (arith, f"{a}.0"), (arith, f"{a}={a}"), (arith, ""),
        (arith, f"{int(a) + 1}"), (arith, arith.metadata["entry"]["metadata"]["expression"]),
        (p24, "(2+4)*(1+3)" if sorted(nums) != [1, 2, 3, 4] else "(3+5)*(1+2)"),  # foreign numbers: scorer says 1.0
        (p24, "__import__('os').getpid()"),  # parse_expr would eval this
        (p24, "24"), (p24, "+".join(map(str, nums))),
    ]
    out = [{"task": t, "actions": [f"<answer>{x}</answer>"], "rewarded": False} for t, x in cases]
    return out + [{"task": t, "actions": [f"<answer>{t.answer}</answer>"], "rewarded": True} for t in (arith, p24)]


SPEC = register_env(EnvSpec(
    name=NAME, revision=REVISION, make=ReasoningGymEnv, generate=generate,
    expert=make_expert(EXPERT_ERROR_RATE), reward_weights={"correct": 1.0},
    stop_strings=("</answer>",), special_tokens=("<answer>", "</answer>", "<error>", "</error>"),
    tools=(), description="reasoning-gym families (arithmetic, chain sums, equations, 24-point) behind guarded scorers",
))

__all__ = ["SPEC", "ReasoningGymEnv", "audit_cases", "generate", "make_expert", "score"]
