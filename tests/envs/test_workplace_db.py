import random

import pytest

from tracerl.contract.roles import TerminalReason
from tracerl.envs import get_env
from tracerl.envs.workplace_db import audit_cases, expected_state, generate
from tracerl.envs.workplace_db.db import dump
from tracerl.envs.workplace_db.env import MAX_INVALID, WorkplaceDBEnv

SPEC = get_env("workplace_db")


def test_generation_and_episodes_are_deterministic(kit):
    a, b = generate("train", 30, seed=1), generate("train", 30, seed=1)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]
    r1, r2 = (kit.run_expert(SPEC, a[3], random.Random(2)) for _ in range(2))
    assert [s.observation for s in r1[1]] == [s.observation for s in r2[1]] and r1[2] == r2[2]


def test_heldout_is_disjoint():
    train = {t.id for s in range(3) for t in generate("train", 100, seed=s)}
    held = generate("heldout", 60, seed=4)
    assert not train & {t.id for t in held} and all(t.split == "heldout" for t in held)


@pytest.mark.parametrize("error_rate", [0.0, 0.25])
def test_expert_succeeds_at_its_configured_rate(kit, error_rate):
    # the shortcut (write with a guessed id) always leaves a wrong database: success = 1 - error_rate
    rate = kit.success_rate(SPEC, generate("train", 300, seed=2), seed=3, error_rate=error_rate)
    assert abs(rate - (1 - error_rate)) <= 0.08


def test_verdict_comes_from_the_database_not_the_transcript(kit):
    task = generate("train", 1, seed=0, difficulty=2 / 3)[0]
    script = [f"<call>{c}</call>" for c in task.metadata["script"]]
    steps, env = kit.play(SPEC, task, script)
    assert steps[-1].terminal_reason == TerminalReason.EOS and steps[-1].reward_components == {"correct": 1.0, "invalid_actions": 0.0}
    assert dump(env._conn) == expected_state(task)
    # the same writes in another order, with extra reads, reach the same state: still rewarded
    reordered = [script[1], script[0], "<call>find employees team red</call>", script[2], script[3]]
    assert kit.play(SPEC, task, reordered)[0][-1].reward_components == {"correct": 1.0, "invalid_actions": 0.0}


def test_retried_tool_calls_are_idempotent(kit):
    for task in generate("train", 40, seed=5):
        script = [f"<call>{c}</call>" for c in task.metadata["script"]]
        once, env_once = kit.play(SPEC, task, script)
        retried = [c for c in script[:-1] for _ in range(3)] + script[-1:]
        thrice, env_thrice = kit.play(SPEC, task, retried)
        assert dump(env_once._conn) == dump(env_thrice._conn)
        assert once[-1].reward_components == thrice[-1].reward_components == {"correct": 1.0, "invalid_actions": 0.0}
        adds = [s.observation for s in thrice if s.observation and s.observation.startswith("<result>ok id ")]
        assert len(set(adds)) <= 1  # a retried insert reports the same id


def test_invalid_and_blocked_calls_leave_the_database_untouched(kit):
    task = generate("train", 1, seed=0, difficulty=1 / 3)[0]
    env = WorkplaceDBEnv(max_invalid=None)
    env.reset(task, 0)
    start = env.state_hash()
    cases = {
        "find employees": "invalid_action", "<call>fire everyone</call>": "invalid_action",
        "<call>set employees name x</call>": "invalid_action", "<call>set employees id 1 salary 9</call>": "invalid_action",
        "<call>set employees id 1 team purple</call>": "invalid_action", "<call>add employees name x</call>": "invalid_action",
        "<call>set tickets id 1 owner 99</call>": "invalid_action", "<call>find payroll id 1</call>": "invalid_action",
        "<call>delete employees id 1</call>": "blocked_action", "<call>drop tickets</call>": "blocked_action",
        "<call>find tickets topic x' OR '1'='1</call>": "invalid_action",
    }
    for action, kind in cases.items():
        step = env.step(action)
        assert not step.terminated and step.info["invalid_action"], action
        assert step.observation.startswith(f"<error>{kind}"), (action, step.observation)
        assert step.info["blocked_action"] == (kind == "blocked_action")
    assert env.state_hash() == start


def test_the_max_invalid_th_invalid_call_ends_the_episode_as_a_failure(kit):
    task = generate("train", 1, seed=0, difficulty=1 / 3)[0]
    last = kit.ends_after_invalid(SPEC.make(), task, "<call>fire everyone</call>", MAX_INVALID)
    assert last.reward_components == {"correct": 0.0, "invalid_actions": float(MAX_INVALID)}


def test_quoted_sql_is_data_not_code(kit):
    task = generate("train", 1, seed=0, difficulty=1 / 3)[0]
    steps, env = kit.play(SPEC, task, ["<call>find employees name x';DROP/**/TABLE/**/tickets;--</call>"])
    assert steps[0].observation == "<result>none</result>\n"
    assert len(dump(env._conn)["tickets"]) == len(task.metadata["rows"]["tickets"])


def test_database_fault_is_infra_failure():
    task = generate("train", 1, seed=0, difficulty=1 / 3)[0]
    env = SPEC.make()
    env.reset(task, 0)
    env._conn.close()  # the database goes away under the tool
    step = env.step(f"<call>{task.metadata['script'][0]}</call>")
    assert step.terminated and step.terminal_reason == TerminalReason.INFRA_FAILURE
    assert step.reward_components == {} and "infra_error" in step.info


def test_no_done_no_verdict(kit):
    task = generate("train", 1, seed=0, difficulty=0.0)[0]
    steps, _ = kit.play(SPEC, task, [f"<call>{task.metadata['script'][0]}</call>", "all done, ticket closed."])
    assert not steps[-1].terminated  # prose is not a tool call: the loop's turn budget ends it


def test_audit_cases_are_not_rewarded(kit):
    kit.check_audit(SPEC, audit_cases())
