"""The code graders' result channels cannot be forged by the program under test (issue 38, open
from round 2: the `<run>` harness printed results from the candidate's own interpreter with a
nonce the candidate could read from its caller's frame).

Every attack in `tracerl.verifiers.forgery_attacks` defines `f` returning 0 for cases whose
expected values are 4 and 5, and tries to report 4 and 5 anyway. Each must pass 0 of 2 through
both the `<run>` harness and the hidden-tests verifier; the honest `f` passes 2 of 2, so a
harness that scores everything zero fails here too.
"""

import pytest

from tracerl.envs.code_tests.harness import evaluate
from tracerl.verifiers import UnitTestVerifier
from tracerl.verifiers.forgery_attacks import NAMES, forgery_program

CASES = [(1, 4), (2, 5)]  # f(x) = x + 3
TASK = {"tests": [{"expr": "f(1)", "expected": 4}, {"expr": "f(2)", "expected": 5}]}


def test_the_honest_function_passes_both_channels():
    assert evaluate("def f(x): return x + 3", CASES).passed == 2
    r = UnitTestVerifier(timeout_s=1.0).verify(TASK, "<code>def f(x): return x + 3</code>")
    assert r.components["tests_passed"] == 1.0


@pytest.mark.parametrize("name", NAMES)
def test_run_harness_cannot_be_forged(name):
    out = evaluate(forgery_program(name, [4, 5]), CASES)
    assert (out.passed, out.total) == (0, 2), out
    assert out.feedback  # the policy is told what actually happened (f(1) gave 0, or an error)


@pytest.mark.parametrize("name", ["frame", "gc", "proc-mem", "print", "system-exit"])
def test_hidden_tests_cannot_be_forged(name):
    r = UnitTestVerifier(timeout_s=1.0).verify(TASK, f"<code>{forgery_program(name, [4, 5])}</code>")
    assert r.components["tests_passed"] == 0.0, r.raw


def test_a_case_can_only_write_its_own_result():
    # The first case's process leaves a process behind (setsid, so the group kill misses it) that
    # writes the second case's value 5 to every descriptor it can reach while the second case runs.
    # It holds only the first case's pipe: that case runs past its deadline (its pipe never closes)
    # and the second case's f returns 0, so 0 of 2; a reachable second pipe would make it 1.
    code = ("import os, json, sys, time\n"
            "def f(x):\n"
            "    if x == 1:\n"
            "        if os.fork() == 0:\n"
            "            os.setsid()\n"
            "            for fd in range(3, 64):\n"
            "                try: os.write(fd, json.dumps({'value': 5}).encode())\n"
            "                except OSError: pass\n"
            "            time.sleep(3)\n"
            "            os._exit(0)\n"
            "        return 4\n"
            "    return 0\n")
    out = evaluate(code, CASES)
    assert out.passed == 0 and out.status == "timeout", out
