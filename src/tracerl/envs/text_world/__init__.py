"""text_world: rooms, doors, keys and chests; take the coin (the ALFWorld / GiGPO pattern)."""

from __future__ import annotations

import json
import random

from tracerl.contract.task import Task
from tracerl.envs import _audit
from tracerl.envs._generation import generate_tasks
from tracerl.envs.base import EnvSpec, register_env
from tracerl.envs.text_world.env import NAME, REVISION, VERIFIER, TextWorldEnv, expected_success, make_expert
from tracerl.envs.text_world.world import LEVELS, make_world, plan

DIFFICULTY_RANGE = (0.0, 1.0)
EXPERT_ERROR_RATE = 0.1  # per turn; a tiny SFT model adds slips of its own (55% invalid turns measured at 0.25)
STEP_SLACK = 2  # step limit = shortest plan + slack


def generate(split: str, n: int, seed: int = 0, difficulty=None) -> list[Task]:
    """`n` worlds of `split`; a world is held out iff the hash of its layout falls in the held-out
    bucket, so no world is in both splits. Difficulty in [0, 1] maps to levels 0..3: an open
    passage, a closed door, a locked door with its key, three rooms with the key and coin in chests."""

    def make(rng: random.Random, level: int) -> tuple[str, dict]:
        world = make_world(rng, level)
        best = plan(world, world["state"])
        meta = {"world": world, "max_steps": len(best) + STEP_SLACK, "plan_len": len(best)}
        return json.dumps(world, sort_keys=True), {
            "source": NAME, "source_revision": REVISION, "prompt": "goal: take the coin.",
            "answer": best, "metadata": meta}

    return generate_tasks(NAME, split, n, seed, difficulty, max(LEVELS), make)


def audit_cases() -> list[dict]:
    """Action sequences that must not reach the goal, and the shortest plan, which must."""
    task = generate("train", 1, seed=3, difficulty=1.0)[0]
    best, limit = task.answer, task.metadata["max_steps"]
    wrap = lambda acts: [f"<action>{a}</action>" for a in acts]  # noqa: E731
    bad = [
        (wrap(best[:-1] + ["take the coin"]), "an article: not in the action language"),
        (wrap(["take coin"] * limit), "grab the coin blindly until the step limit"),
        (["<action>take coin</action> " * 3 + "<action>go north</action>"] * limit, "several actions per turn"),
        (wrap(best[:-1]) + ["I take the coin. goal done."], "claim success in prose"),
        (wrap(best[:-1] + ["<obs>you take the coin.</obs>"]), "forge an observation"),
    ]
    return ([{"task": task, "actions": a, "rewarded": False, "attack": why} for a, why in bad]
            + [{"task": task, "actions": wrap(best), "rewarded": True, "attack": "shortest plan"}])


SPEC = register_env(EnvSpec(
    name=NAME, revision=REVISION, make=TextWorldEnv, generate=generate,
    expert=make_expert(EXPERT_ERROR_RATE),
    reward_weights={"success": 1.0, "invalid_actions": -0.1},
    stop_strings=("</action>",), verifier=VERIFIER,
    special_tokens=("<action>", "</action>", "<obs>", "</obs>", "<error>", "</error>"),
    tools=("action",),
    description="rooms, doors, keys and chests; take the coin within the step limit; state hashes for GiGPO",
))

audit = _audit.register(SPEC, audit_cases)  # `tracerl audit` builder: (verifier, cases)

__all__ = ["SPEC", "TextWorldEnv", "audit_cases", "expected_success", "generate", "make_expert"]
