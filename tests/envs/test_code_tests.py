import random

import pytest

from tracerl.contract.roles import TerminalReason
from tracerl.envs import get_env
from tracerl.envs.code_tests import audit_cases, generate
from tracerl.envs.code_tests.env import MAX_INVALID, RUN_BUDGET, CodeTestsEnv
from tracerl.envs.code_tests.harness import evaluate
from tracerl.sandbox import ExecResult, Status

SPEC = get_env("code_tests")


def test_generation_is_deterministic_and_bugs_are_caught():
    a, b = generate("train", 40, seed=1), generate("train", 40, seed=1)
    assert [t.to_dict() for t in a] == [t.to_dict() for t in b]
    for t in a:
        assert len(t.tests["visible"]) == 2 and len(t.tests["hidden"]) == 5
        assert all(f"f({x!r}) == {y!r}" in t.prompt for x, y in t.tests["visible"])
        inputs = [repr(x) for x, _ in t.tests["visible"] + t.tests["hidden"]]
        assert len(set(inputs)) == 7  # hidden inputs are never the visible ones


def test_heldout_is_disjoint():
    train = {t.id for s in range(2) for t in generate("train", 150, seed=s)}
    held = generate("heldout", 60, seed=3)
    assert not train & {t.id for t in held} and all(t.split == "heldout" for t in held)


def test_grading_by_hand():
    cases = [(1, 4), (2, 5), (-3, 0)]  # f(x) = x + 3
    assert evaluate("def f(x): return x + 3", cases).passed == 3
    out = evaluate("def f(x): return x + 3 if x > 0 else 7", cases)
    assert (out.passed, out.total) == (2, 3) and out.feedback == "f(-3) gave 7, want 0"
    out = evaluate("def f(x): return 1 / 0", cases)
    assert out.passed == 0 and out.feedback == "f(1) gave raised ZeroDivisionError, want 4"


def test_expert_episodes_and_rate(kit):
    # untested bug submissions (error_rate) always fail a hidden test: success = 1 - error_rate.
    # 60 episodes at 0.25: binomial sd 0.056, tolerance 0.17 (each episode costs 2-3 sandbox calls)
    tasks = generate("train", 60, seed=2)
    assert kit.success_rate(SPEC, tasks[:10], seed=0, error_rate=0.0) == 1.0
    rate = kit.success_rate(SPEC, tasks, seed=1, error_rate=0.25)
    assert abs(rate - 0.75) <= 0.17


def test_draft_error_is_caught_by_the_tool_and_fixed(kit):
    task = generate("train", 1, seed=0)[0]

    class Draws(random.Random):
        def random(self):
            return 0.3  # above error_rate 0.2, inside draft_error_rate 0.3: run the bug first

    actions, steps, _ = kit.run_expert(SPEC, task, Draws())
    assert actions[0] == f"<run>{task.metadata['buggy']}</run>" and "want" in steps[0].observation
    assert actions[1] == f"<run>{task.answer}</run>" and steps[1].observation.startswith("<output>pass 2/2")
    assert steps[2].reward_components == {"tests": 1.0}


def test_episode_replays_identically(kit):
    task = generate("train", 2, seed=0)[1]
    r1, r2 = (kit.run_expert(SPEC, task, random.Random(9)) for _ in range(2))
    assert [s.observation for s in r1[1]] == [s.observation for s in r2[1]] and r1[2] == r2[2]


def test_audit_cases_are_not_rewarded(kit):
    kit.check_audit(SPEC, audit_cases())


def test_invalid_actions_and_run_budget(kit):
    task = generate("train", 1, seed=0)[0]
    env = CodeTestsEnv(max_invalid=None)
    env.reset(task, 0)
    for bad in ["def f(x): return x", "<code>print(1)</code>", "<run>x</answer>"]:
        step = env.step(bad)
        assert step.info["invalid_action"] and step.observation.startswith("<error>invalid_action")
    for _ in range(RUN_BUDGET):
        assert env.step(f"<run>{task.answer}</run>").observation == "<output>pass 2/2</output>\n"
    step = env.step(f"<run>{task.answer}</run>")
    assert step.info["invalid_action"] and "budget" in step.observation


def test_the_max_invalid_th_invalid_action_ends_the_episode_as_a_failure(kit):
    task = generate("train", 1, seed=0)[0]
    last = kit.ends_after_invalid(CodeTestsEnv(), task, "def f(x): return x", MAX_INVALID)
    assert last.reward_components == {"tests": 0.0}


class CrashingSandbox:
    def run(self, code, **kwargs):
        return ExecResult(Status.CRASH, None, "", "worker died", reason="worker died")


@pytest.mark.parametrize("tool", ["run", "answer"])
def test_sandbox_crash_is_infra_failure(tool):
    task = generate("train", 1, seed=0)[0]
    env = CodeTestsEnv(sandbox=CrashingSandbox())
    env.reset(task, 0)
    step = env.step(f"<{tool}>{task.answer}</{tool}>")
    assert step.terminated and step.terminal_reason == TerminalReason.INFRA_FAILURE
    assert step.reward_components == {}


def test_program_errors_and_timeouts_are_the_policys(kit):
    task = generate("train", 1, seed=0)[0]
    steps, _ = kit.play(SPEC, task, ["<run>def f(x):\n    while True: pass</run>"])
    assert steps[0].observation.startswith("<output>timeout") and not steps[0].terminated
