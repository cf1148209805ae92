"""Runs candidate code on test cases in the sandbox and grades it outside the candidate's process.

Round 2 printed the results from the candidate's own interpreter, marked with a nonce that lived in
that interpreter too (a code constant, `linecache`, the caller's frame, `/proc/self/mem`): a
program could read it and print passing lines, or replace `print`. Now `<run>` goes through the
unit-test verifier's grader (`tracerl.verifiers.unit_tests.run_grader`, `_grader.py`): each case
runs in its own child of a non-dumpable grader, sends back only JSON bytes over a pipe that carries
that one case's result, and the grader's report ends with a nonce read after the last case from a
descriptor no child ever held. Expected values never enter the sandbox; the host compares. So the
only way to make a case pass is for `f` to return the value.
"""

from __future__ import annotations

import dataclasses

from tracerl.sandbox import Sandbox, default_sandbox
from tracerl.verifiers.unit_tests import run_grader, same_value

CASE_TIMEOUT_S = 0.5  # each case's deadline in its own process
MEMORY_BYTES = 256 << 20
OUTPUT_BYTES = 8192


@dataclasses.dataclass
class Outcome:
    status: str  # ok, error (a case raised or did not run), timeout, crash (the sandbox failed), or the sandbox's
    passed: int
    total: int
    feedback: str  # one short line for the policy

    @property
    def infra_failure(self) -> bool:
        return self.status == "crash"


def evaluate(code: str, cases: list, sandbox: Sandbox | None = None, timeout_s: float = CASE_TIMEOUT_S) -> Outcome:
    """`cases` are (input, expected) pairs for `f`; the passed count and the first failure."""
    inputs = [{"kind": "expr", "expr": f"f({x!r})"} for x, _ in cases]
    run = run_grader(sandbox or default_sandbox(), code, inputs, timeout_s=timeout_s,
                     memory_bytes=MEMORY_BYTES, stdout_bytes=OUTPUT_BYTES)
    if run.status == "crash":
        return Outcome("crash", 0, len(cases), f"sandbox fault: {run.reason}")
    if run.results is None:
        status = run.status if run.status != "ok" else "error"
        return Outcome(status, 0, len(cases), f"{status}: the program stopped the test harness")
    passed, feedback, status = 0, "", "ok" if run.syntax_ok else "error"
    for (x, y), result in zip(cases, run.results):
        error = str(result.get("error", ""))
        if result.get("ran") and same_value(result.get("value"), y):
            passed += 1
            continue
        if error.startswith("timed out"):
            status = "timeout"
        elif status == "ok":
            status = "error" if not result.get("ran") else "ok"
        if feedback:
            continue
        if result.get("ran"):
            feedback = f"f({x!r}) gave {result.get('value')!r:.40}, want {y!r}"
        elif error.startswith("raised "):
            feedback = f"f({x!r}) gave {error[:60]}, want {y!r}"
        elif error.startswith("timed out"):
            feedback = f"timeout: f({x!r}) {error[:60]}"
        else:
            feedback = f"error: {error[:80]}"
    return Outcome(status, passed, len(cases), feedback)
