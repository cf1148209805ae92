"""text_world: rooms, doors, keys and chests; take the coin (the ALFWorld / GiGPO pattern)."""

from __future__ import annotations

import hashlib
import json
import random

from tracerl.envs.base import EnvSpec, register_env
from tracerl.envs.text_world.env import NAME, REVISION, TextWorldEnv, expected_success, make_expert
from tracerl.envs.text_world.world import LEVELS, make_world, plan
from tracerl.errors import UserError
from tracerl.tasks.task import SPLITS, Task

DIFFICULTY_RANGE = (min(LEVELS), max(LEVELS))
EXPERT_ERROR_RATE = 0.25
STEP_SLACK = 2  # step limit = shortest plan + slack


def _split_of(key: str) -> str:
    return "heldout" if int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 5 == 0 else "train"


def generate(split: str, n: int, seed: int = 0, difficulty: float | None = None) -> list[Task]:
    """`n` worlds of `split`; a world is held out iff the hash of its layout falls in the held-out
    bucket (one in five), so no world is in both splits."""
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; use one of {SPLITS}")
    if difficulty is not None and round(difficulty) not in LEVELS:
        raise UserError(f"text_world difficulty {difficulty!r} is out of range; use {DIFFICULTY_RANGE}")
    tasks: list[Task] = []
    seen: set[str] = set()
    i = 0
    while len(tasks) < n:
        if i > 100 * n + 1000:
            raise UserError(f"text_world has only {len(tasks)} distinct {split} tasks at difficulty {difficulty}; ask for fewer")
        rng = random.Random(f"{NAME}:{seed}:{i}")
        i += 1
        level = round(difficulty) if difficulty is not None else rng.choice(LEVELS)
        world = make_world(rng, level)
        key = json.dumps(world, sort_keys=True)
        if _split_of(key) != split or key in seen:
            continue
        seen.add(key)
        best = plan(world, world["state"])
        tasks.append(Task(
            id=f"{NAME}-{hashlib.sha256(key.encode()).hexdigest()[:12]}", source=NAME,
            source_revision=REVISION, split=split, prompt="goal: take the coin.", answer=best,
            difficulty=float(level),
            metadata={"world": world, "max_steps": len(best) + STEP_SLACK, "plan_len": len(best)},
        ))
    return tasks


def audit_cases() -> list[dict]:
    """Action sequences that must not reach the goal, and the shortest plan, which must."""
    task = generate("train", 1, seed=3, difficulty=3)[0]
    best = task.answer
    wrap = lambda acts: [f"<action>{a}</action>" for a in acts]  # noqa: E731
    bad = [
        wrap(best[:-1] + ["take the coin"]),  # article: not in the language
        wrap(["take coin"] * task.metadata["max_steps"]),  # grab blindly until the step limit
        ["<action>take coin</action> " * 3 + "<action>go north</action>"] * task.metadata["max_steps"],
        wrap(best[:-1]) + ["I take the coin. goal done."],  # claim success in prose
        wrap(best[:-1] + ["<obs>you take the coin.</obs>"]),  # forge an observation
    ]
    return ([{"task": task, "actions": a, "rewarded": False} for a in bad]
            + [{"task": task, "actions": wrap(best), "rewarded": True}])


SPEC = register_env(EnvSpec(
    name=NAME, revision=REVISION, make=TextWorldEnv, generate=generate,
    expert=make_expert(EXPERT_ERROR_RATE),
    reward_weights={"goal": 1.0, "invalid_actions": -0.1},
    stop_strings=("</action>",),
    special_tokens=("<action>", "</action>", "<obs>", "</obs>", "<error>", "</error>"),
    tools=("action",),
    description="rooms, doors, keys and chests; take the coin within the step limit; state hashes for GiGPO",
))

__all__ = ["SPEC", "TextWorldEnv", "audit_cases", "expected_success", "generate", "make_expert"]
