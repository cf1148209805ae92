import random

import pytest

from tracerl.contract.roles import TerminalReason
from tracerl.envs import get_env
from tracerl.envs.text_world import STEP_SLACK, audit_cases, expected_success, generate
from tracerl.envs.text_world.env import TextWorldEnv

SPEC = get_env("text_world")


def test_generation_and_episodes_are_deterministic(kit):
    a, b = generate("train", 30, seed=1), generate("train", 30, seed=1)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]
    r1 = kit.run_expert(SPEC, a[7], random.Random(5))
    r2 = kit.run_expert(SPEC, a[7], random.Random(5))
    assert r1[0] == r2[0] and [s.observation for s in r1[1]] == [s.observation for s in r2[1]] and r1[2] == r2[2]


def test_heldout_worlds_never_appear_in_train():
    train = {t.id for s in range(2) for t in generate("train", 100, seed=s)}
    held = generate("heldout", 60, seed=9)
    assert not train & {t.id for t in held} and all(t.split == "heldout" for t in held)


def test_shortest_plans_by_level():
    # level 0: go, take coin (2); 1: + open door (3); 2: + take key, unlock (5); 3: 9 (worked in the doc)
    lengths = {lvl: {t.metadata["plan_len"] for t in generate("train", 20, difficulty=lvl / 3)} for lvl in range(4)}
    assert lengths[0] == {2} and lengths[1] == {3} and lengths[2] == {5}
    assert min(lengths[3]) >= 8


def test_expert_without_errors_follows_the_shortest_plan(kit):
    for task in generate("train", 40, seed=2):
        actions, steps, _ = kit.run_expert(SPEC, task, random.Random(0), error_rate=0.0)
        assert [a[len("<action>"):-len("</action>")] for a in actions] == task.answer
        assert steps[-1].terminal_reason == TerminalReason.ENV_SUCCESS
        assert steps[-1].reward_components == {"success": 1.0, "invalid_actions": 0.0}


def test_expert_success_matches_the_slip_model(kit):
    # each slip wastes one step; success iff at most STEP_SLACK slips happen before the plan ends
    eps, tasks = 0.25, generate("train", 300, seed=3)
    predicted = sum(expected_success(t.metadata["plan_len"], STEP_SLACK, eps) for t in tasks) / len(tasks)
    rate = kit.success_rate(SPEC, tasks, seed=6, error_rate=eps)
    assert abs(rate - predicted) <= 0.08  # binomial sd about 0.027
    assert expected_success(2, 2, 0.0) == 1.0
    assert expected_success(2, 0, 0.5) == pytest.approx(0.25)  # two clean steps in a row


def test_equal_states_hash_equal_across_trajectories(kit):
    task = generate("train", 1, seed=0, difficulty=2 / 3)[0]  # take key, unlock, open, go, take coin
    plan = task.answer
    _, env_a = kit.play(SPEC, task, [f"<action>{plan[0]}</action>"])
    _, env_b = kit.play(SPEC, task, ["<action>dance</action>", "<action>go up</action>", f"<action>{plan[0]}</action>"])
    assert env_a.state_hash() == env_b.state_hash()  # invalid actions do not change the state
    _, env_c = kit.play(SPEC, task, [f"<action>{plan[1]}</action>"])  # unlock without the key: invalid
    fresh = SPEC.make()
    fresh.reset(task, 0)
    assert env_c.state_hash() == fresh.state_hash() != env_a.state_hash()


def test_invalid_actions_are_penalised_and_counted(kit):
    task = generate("train", 1, seed=0, difficulty=0.0)[0]
    bad = ["go north north", "<action>fly</action>", "<action>take coin</action>"]  # coin is elsewhere
    steps, _ = kit.play(SPEC, task, bad[:2])
    assert all(s.info["invalid_action"] and s.observation.startswith("<error>invalid_action") for s in steps)
    steps, _ = kit.play(SPEC, task, bad[1:2] + [f"<action>{a}</action>" for a in task.answer])
    assert steps[-1].reward_components == {"success": 1.0, "invalid_actions": 1.0}
    assert kit.reward(SPEC, steps[-1]) == pytest.approx(0.9)  # 1 - 0.1 * 1


def test_step_limit_ends_in_env_failure(kit):
    task = generate("train", 1, seed=0, difficulty=0.0)[0]
    limit = task.metadata["max_steps"]
    steps, env = kit.play(SPEC, task, ["<action>go nowhere</action>"] * (limit + 3))
    assert len(steps) == limit and steps[-1].terminal_reason == TerminalReason.ENV_FAILURE
    assert steps[-1].reward_components == {"success": 0.0, "invalid_actions": float(limit)}
    assert env.step("<action>go west</action>").info["invalid_action"]  # nothing after the end


def test_partial_observability():
    task = generate("train", 1, seed=0, difficulty=1.0)[0]
    prompt = TextWorldEnv().reset(task, 0)[1]["content"]
    assert "coin" not in prompt.split("\n", 1)[1]  # the coin is two rooms away, inside a chest


def test_audit_cases_are_not_rewarded(kit):
    kit.check_audit(SPEC, audit_cases())
