"""The text_world environment: a partially observable world of rooms, doors, keys and chests.

Grammar: one `<action>…</action>` per turn, from a small language: `go north|south|east|west`,
`take <item>`, `open door`, `open chest`, `unlock door with <color> key`. An action that is not in
the language or fails in the current state (a wall, a locked door, an absent item) is an invalid
action: the state is unchanged, the observation is `<error>invalid_action: …</error>`, and it counts
toward the `invalid_actions` component (weight −0.1, the GiGPO setting). Taking the coin ends the
episode as `env_success` (`success` 1); running out of the task's step limit ends it as `env_failure`.

`state_hash()` covers the hidden state only (position, doors, chests, floor, inventory) and not the
step count, so the same world state reached by different trajectories of a group hashes equal: the
anchor states of GiGPO.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
from collections.abc import Callable

from tracerl.contract.roles import TerminalReason
from tracerl.contract.task import Task
from tracerl.envs._verify import grade
from tracerl.envs.base import Message, Step
from tracerl.envs.grammar import parse_tagged
from tracerl.envs.text_world.verifier import NAME as VERIFIER
from tracerl.envs.text_world.world import apply, candidate_actions, describe, is_goal

NAME = "text_world"
REVISION = "text_world-env-1"
SYSTEM = ("Take the coin. Each turn write one <action>…</action>: go <direction>, take <item>, "
          "open door, open chest, unlock door with <color> key.")


class TextWorldEnv:
    name = NAME
    revision = REVISION

    def __init__(self) -> None:
        self._task: Task | None = None

    def reset(self, task: Task, seed: int) -> list[Message]:
        self._task = task
        self._world = task.metadata["world"]
        self._state = copy.deepcopy(self._world["state"])
        self._steps = 0
        self._invalid = 0
        self._done = False
        self._max_steps = int(task.metadata["max_steps"])
        return [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"{task.prompt}\n{describe(self._world, self._state)}"}]

    def step(self, action_text: str) -> Step:
        assert self._task is not None, "call reset() before step()"
        if self._done:
            return Step("<error>episode_over</error>\n", info={"invalid_action": True})
        self._steps += 1
        action = parse_tagged(action_text, ("action",))
        nxt, msg = (None, action.reason) if action.kind == "invalid" else apply(self._world, self._state, action.body)
        invalid = nxt is None
        if invalid:
            self._invalid += 1
            obs = f"<error>invalid_action: {msg}</error>\n"
        else:
            self._state = nxt
            obs = f"<obs>{msg}</obs>\n"
        info = {"invalid_action": invalid, "steps": self._steps, "tool": None if action.kind == "invalid" else "action",
                "tool_status": "invalid_action" if invalid else "ok"}
        if is_goal(self._state) or self._steps >= self._max_steps:
            self._done = True
            reason = TerminalReason.ENV_SUCCESS if is_goal(self._state) else TerminalReason.ENV_FAILURE
            comps, vinfo = grade(VERIFIER, self._task, {"state": self._state, "invalid_actions": self._invalid})
            return Step(obs, True, reason, comps, {**info, **vinfo})
        return Step(obs, info=info)

    def state_hash(self) -> str:
        payload = {"task": self._task.id if self._task else None, "state": getattr(self, "_state", None)}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def make_expert(error_rate: float = 0.1) -> Callable[[Task, list[str], random.Random], str]:
    """The shortest plan (computed by breadth-first search when the task was generated) with
    ε-noise: with probability `error_rate` per turn the expert instead issues an action that is
    invalid in the current state (a wall, a missing item). A slip wastes one step and leaves the
    state unchanged, so the expert's state is always the plan's prefix after its valid steps, and
    with a plan of length L and a step limit of L + slack the episode succeeds iff at most `slack`
    slips happen before the plan completes: P(success) = Σ_{k≤slack} C(L+k−1, k) ε^k (1−ε)^L
    (`expected_success`)."""

    def expert(task: Task, observations: list[str], rng: random.Random, *, error_rate: float = error_rate) -> str:
        world, best = task.metadata["world"], task.answer
        done = [o for o in observations if not o.startswith("<error>")]
        if rng.random() < error_rate:
            state = copy.deepcopy(world["state"])
            for act in best[: len(done)]:
                state = apply(world, state, act)[0]
            bad = [a for a in candidate_actions(world, state) if apply(world, state, a)[0] is None]
            return f"<action>{rng.choice(bad)}</action>"
        return f"<action>{best[len(done)]}</action>"

    return expert


def expected_success(plan_len: int, slack: int, error_rate: float) -> float:
    from math import comb

    return sum(comb(plan_len + k - 1, k) * error_rate**k * (1 - error_rate) ** plan_len for k in range(slack + 1))
