"""Every environment rewards through its registered verifier, and nothing else computes a reward.

Each registered verifier is replaced by a sentinel that returns odd component values; an episode
played by the env's expert (and one that ends at the invalid-action limit, where the env has one)
must report exactly the sentinel's components and name the sentinel. An env that graded inline
would report its own numbers and fail here.
"""

from __future__ import annotations

import importlib.util
import random

import pytest

from tracerl.envs import env_names, get_env
from tracerl.verifiers import VerifierResult
from tracerl.verifiers import registry

# the built-in environments (test modules register toy envs of their own in the same process)
ENVS = [n for n in env_names() if get_env(n).make.__module__.startswith("tracerl.envs.")
        and (n != "reasoning_gym" or importlib.util.find_spec("reasoning_gym"))]


class Sentinel:
    def __init__(self, name: str, components: tuple[str, ...], calls: list):
        self.name, self.revision, self.components, self.primary = name, "sentinel-9", components, components[0]
        self._calls = calls

    def verify(self, task, trajectory):
        self._calls.append(trajectory)
        return VerifierResult({c: 0.37 + i for i, c in enumerate(self.components)}, {})

    def audit_cases(self):
        return []


@pytest.fixture
def sentinel(monkeypatch):
    calls: list = []

    def install(spec):
        comps = tuple(spec.reward_weights)
        monkeypatch.setitem(registry._FACTORIES, spec.verifier, lambda **kw: Sentinel(spec.verifier, comps, calls))
        registry._IDENTITY.pop(spec.verifier, None)
        return {c: 0.37 + i for i, c in enumerate(comps)}

    yield install, calls
    registry._IDENTITY.clear()


def _play(spec, task, actions):
    env = spec.make()
    env.reset(task, 0)
    for a in actions:
        step = env.step(a)
        if step.terminated:
            return step
    raise AssertionError(f"{spec.name}: the episode did not end")


def _expert_episode(spec, task):
    env = spec.make()
    env.reset(task, 0)
    rng, obs = random.Random(0), []
    for _ in range(40):
        try:
            action = spec.expert(task, obs, rng, error_rate=0.0)
        except TypeError:
            action = spec.expert(task, obs, rng)
        step = env.step(action)
        if step.terminated:
            return step
        obs.append(step.observation or "")
    raise AssertionError(f"{spec.name}: the expert did not finish")


@pytest.mark.parametrize("name", ENVS)
def test_every_env_declares_a_registered_verifier_with_an_audit_set(name):
    from tracerl.verifiers.audit import audit_names

    spec = get_env(name)
    assert spec.verifier, f"{name} declares no verifier"
    v = registry.get_verifier(spec.verifier)
    assert v.name == spec.verifier and v.revision and set(spec.reward_weights) <= set(v.components)
    if name != "arith":  # arith's lenient rule is documented, and it has no adversarial set
        assert spec.verifier in audit_names()


@pytest.mark.parametrize("name", ENVS)
def test_the_expert_episode_is_rewarded_by_the_registered_verifier_only(name, sentinel):
    install, calls = sentinel
    spec = get_env(name)
    expected = install(spec)
    task = spec.generate("train", 1, seed=3)[0]
    step = _expert_episode(spec, task)
    assert step.reward_components == expected, f"{name} computed a reward outside its verifier"
    assert step.info["verifier"] == spec.verifier and step.info["verifier_revision"] == "sentinel-9"
    assert len(calls) == 1


@pytest.mark.parametrize("name", [n for n in ENVS if n in ("search_qa", "workplace_db", "code_tests", "reasoning_gym", "terminal", "swe")])
def test_the_invalid_action_limit_also_goes_through_the_verifier(name, sentinel):
    install, calls = sentinel
    spec = get_env(name)
    expected = install(spec)
    task = spec.generate("train", 1, seed=3)[0]
    step = _play(spec, task, ["gibberish", "more gibberish", "still", "no"])
    assert step.reward_components == expected and calls == [calls[0]]


def test_text_world_step_limit_goes_through_the_verifier(sentinel):
    install, calls = sentinel
    spec = get_env("text_world")
    expected = install(spec)
    task = spec.generate("train", 1, seed=3)[0]
    step = _play(spec, task, ["<action>go nowhere</action>"] * 50)
    assert step.reward_components == expected and len(calls) == 1


def test_the_trajectory_records_the_verifier_that_ran(tiny, sentinel):
    """Through the agent loop: the stored verifier name/revision are the registered verifier's, and
    the stored reward is the weighted sum of what that verifier returned."""
    from tests.rollout.test_agent_loop import SAMPLING, ScriptedEngine
    from tracerl.rollout import LoopBudgets, run_episodes

    model, tok = tiny
    install, _ = sentinel
    spec = get_env("arith")
    expected = install(spec)
    task = spec.generate("train", 1, 0)[0]
    (traj,) = run_episodes(ScriptedEngine(model, tok, ["1 + 1 = 2"]), spec, [task], ["g"], budgets=LoopBudgets(),
                           sampling=SAMPLING, policy_version=0, seed=0)
    assert (traj.verifier_name, traj.verifier_revision) == ("arith.stated_sum", "sentinel-9")
    assert traj.reward == pytest.approx(sum(spec.reward_weights[c] * v for c, v in expected.items()))


def test_without_the_sentinel_the_real_verifier_is_recorded(tiny):
    from tests.rollout.test_agent_loop import SAMPLING, ScriptedEngine
    from tracerl.rollout import LoopBudgets, run_episodes

    model, tok = tiny
    spec = get_env("arith")
    task = spec.generate("train", 1, 0)[0]
    (traj,) = run_episodes(ScriptedEngine(model, tok, [f"x = {task.answer}"]), spec, [task], ["g"],
                           budgets=LoopBudgets(max_new_tokens=4), sampling=SAMPLING, policy_version=0, seed=0)
    assert traj.verifier_name == "arith.stated_sum" and traj.verifier_revision == "arith-stated-sum-1"
