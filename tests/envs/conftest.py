"""Helpers shared by the environment tests: play scripted actions or the expert through an env."""

from __future__ import annotations

import random
import types

import pytest

from tracerl.contract import TerminalReason
from tracerl.envs.base import EnvSpec, Step


def reward(spec: EnvSpec, step: Step) -> float:
    return sum(spec.reward_weights[k] * v for k, v in step.reward_components.items())


def play(spec: EnvSpec, task, actions: list[str], seed: int = 0, env=None) -> tuple[list[Step], object]:
    """Feeds `actions` until the episode terminates; returns the steps taken and the env."""
    env = env or spec.make()
    env.reset(task, seed)
    steps = []
    for a in actions:
        steps.append(env.step(a))
        if steps[-1].terminated:
            break
    return steps, env


def run_expert(spec: EnvSpec, task, rng: random.Random, max_turns: int = 30, env=None, **expert_kwargs):
    """One expert episode; returns (actions, steps, state hashes after each step)."""
    env = env or spec.make()
    env.reset(task, 0)
    actions, steps, hashes, observations = [], [], [env.state_hash()], []
    for _ in range(max_turns):
        actions.append(spec.expert(task, observations, rng, **expert_kwargs))
        steps.append(env.step(actions[-1]))
        hashes.append(env.state_hash())
        if steps[-1].terminated:
            break
        observations.append(steps[-1].observation)
    return actions, steps, hashes


def success_rate(spec: EnvSpec, tasks, seed: int, **expert_kwargs) -> float:
    rng = random.Random(seed)
    wins = 0
    for t in tasks:
        _, steps, _ = run_expert(spec, t, rng, **expert_kwargs)
        wins += succeeded(spec, steps[-1])
    return wins / len(tasks)


def succeeded(spec: EnvSpec, step: Step) -> bool:
    """The env's primary component (the first reward weight: correct, success, tests) is 1."""
    primary = next(iter(spec.reward_weights))
    return step.terminated and step.reward_components.get(primary, 0.0) >= 1.0


def check_audit(spec: EnvSpec, cases: list[dict]) -> None:
    """Every case marked not rewarded earns nothing; every known-good one earns full reward."""
    assert any(c["rewarded"] for c in cases) and any(not c["rewarded"] for c in cases)
    assert all(c["attack"] for c in cases)  # every case says what it stands for
    for c in cases:
        steps, _ = play(spec, c["task"], c["actions"])
        got = reward(spec, steps[-1]) if steps[-1].terminated else 0.0
        if c["rewarded"]:
            assert steps[-1].terminated and got >= 1.0 - 1e-9, c["actions"]
        else:
            primary = steps[-1].reward_components.get(next(iter(spec.reward_weights)), 0.0)
            assert primary == 0.0 and got <= 0.0, (c["actions"], steps[-1])


def ends_after_invalid(env, task, action: str, times: int) -> Step:
    """Sends the invalid `action` `times` times: only the last ends the episode, as a scored failure."""
    env.reset(task, 0)
    steps = [env.step(action) for _ in range(times)]
    assert not any(s.terminated for s in steps[:-1])
    assert steps[-1].terminated and steps[-1].terminal_reason == TerminalReason.ENV_FAILURE
    return steps[-1]


@pytest.fixture
def kit():
    return types.SimpleNamespace(reward=reward, play=play, run_expert=run_expert,
                                 success_rate=success_rate, check_audit=check_audit,
                                 succeeded=succeeded, ends_after_invalid=ends_after_invalid)
