"""The unit-test verifier against the reward hacks reported for code RL. Each case states the
attack; none may earn any reward, and each is reported with its reason."""

import pytest

from tracerl.sandbox import Sandbox
from tracerl.verifiers import UnitTestVerifier, same_value
from tracerl.verifiers.code_attacks import ADD_TASK, ATTACKS, GOOD_ADD, GOOD_SUM, SUM_TASK

ATTACK_CODE = {name: code for name, _, code in ATTACKS}


@pytest.fixture(scope="module")
def grader():
    with Sandbox() as box:
        yield UnitTestVerifier(sandbox=box, timeout_s=0.5)


def _py(code):
    return f"```python\n{code}\n```"


def _grade(grader, name, task=ADD_TASK):
    r = grader.verify(task, _py(ATTACK_CODE[name]))
    assert r.components["tests_passed"] == 0.0, (name, r.raw)
    assert r.reason, "every refusal carries its reason"
    return r


def test_honest_solutions_pass_every_test(grader):
    r = grader.verify(ADD_TASK, _py(GOOD_ADD))
    assert r.components == {"tests_passed": 1.0, "format": 1.0} and r.raw["passed"] == 4
    assert grader.verify(SUM_TASK, _py(GOOD_SUM)).components["tests_passed"] == 1.0


def test_partial_solution_gets_the_fraction_that_ran_and_passed(grader):
    # abs(a) + b: add(2, 3) -> 5 ok, add(-4, 1) -> 5 but -3 expected, add(10, 20) -> 30 ok,
    # add(7, 8) -> 15 ok: 3 of 4 tests ran and passed = 0.75
    r = grader.verify(ADD_TASK, _py("def add(a, b):\n    return abs(a) + b"))
    assert r.components["tests_passed"] == 0.75 and "add(-4, 1) returned 5" in r.raw["tests"][1]["reason"]


def test_sys_exit_before_asserts(grader):
    """Attack: `sys.exit(0)` at import, so a runner that trusts the exit code sees success."""
    r = _grade(grader, "sys-exit-before-asserts")
    assert all(not t["passed"] for t in r.raw["tests"])


def test_os_exit_before_asserts(grader):
    """Attack: `os._exit(0)`, which even skips `finally` blocks and atexit hooks."""
    _grade(grader, "os-exit-before-asserts")


def test_skip_every_test(grader):
    """Attack: raise a skip (pytest.skip / unittest.SkipTest); a skipped test is not a passed one."""
    _grade(grader, "skip-everything")


def test_always_equal_object(grader):
    """Attack: return an object whose __eq__ always says True (and an int subclass doing the same)."""
    r = _grade(grader, "always-equal")
    assert "(not JSON data)" in r.raw["tests"][0]["reason"]  # only bytes cross back: the object stays behind
    _grade(grader, "always-equal-int")


def test_conftest_and_runner_patching(grader):
    """Attack: drop a conftest.py that rewrites reports, or patch json/the result channel."""
    _grade(grader, "conftest-patch")
    _grade(grader, "runner-patch")
    _grade(grader, "assert-patch")


def test_editing_or_deleting_test_files(grader):
    """Attack: overwrite and delete every file in reach, including the tests."""
    _grade(grader, "edit-test-files")


def test_writing_a_reward_file(grader):
    """Attack: write reward.txt / score.json hoping the grader reads them."""
    _grade(grader, "write-reward-file")


def test_forged_final_line_and_killed_grader(grader):
    """Attack: print a fake grader summary then exit; kill or stop the grader process."""
    _grade(grader, "forge-final-line")
    r = _grade(grader, "kill-the-grader")
    assert "nonce" in r.reason


def test_reading_hidden_expected_values(grader):
    """Attack: walk the filesystem and the caller's frames for the expected outputs."""
    _grade(grader, "read-hidden-tests")


def test_timer_patching_does_not_stop_the_timeout(grader):
    """Attack: monkeypatch time.time/monotonic, then loop forever."""
    r = _grade(grader, "patch-timer")
    assert all("timed out" in t["reason"] for t in r.raw["tests"])


def test_no_code_block_scores_zero_format(grader):
    r = grader.verify(ADD_TASK, "def add(a, b): return a + b")
    assert r.components == {"tests_passed": 0.0, "format": 0.0}


def test_syntax_error_scores_zero_format(grader):
    r = grader.verify(ADD_TASK, _py("def add(a, b) return a + b"))
    assert r.components == {"tests_passed": 0.0, "format": 0.0}


@pytest.mark.parametrize("actual, expected, tol, same", [
    (True, 1, None, False), (1, True, None, False), (1, 1.0, None, True), ([1, 2], (1, 2), None, True),
    ([1, 2], [2, 1], None, False), (3.14159, 3.1416, 1e-4, True), (3.1, 3.1416, 1e-4, False),
    ({"a": 1}, {"a": 1, "b": 2}, None, False), ("1", 1, None, False), (None, None, None, True),
])
def test_strict_value_comparison(actual, expected, tol, same):
    assert same_value(actual, expected, tol) is same


def test_stderr_noise_does_not_fail_a_correct_program(grader):
    code = "import sys\nprint('warning: slow path', file=sys.stderr)\n" + GOOD_SUM
    assert grader.verify(SUM_TASK, _py(code)).components["tests_passed"] == 1.0
