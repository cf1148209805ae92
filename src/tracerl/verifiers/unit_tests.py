"""Unit-test verifier for code tasks: hidden tests, a pristine copy, host-side comparison, a nonce.

A task's `tests` is a list of data, not code the candidate could see or patch:
  {"expr": "add(2, 3)", "expected": 5}            call into the solution, compare the JSON value
  {"expr": "area(1.0)", "expected": 3.14159, "tol": 1e-4}
  {"stdin": "3\\n1 2 3\\n", "stdout": "6\\n"}       run solution.py as a program, compare stdout
Expected values never enter the sandbox. `_grader.py` runs each test in its own child process
from a pristine solution.py, returns plain JSON, and finishes with the per-run nonce; the score is
the fraction of tests that ran and passed, and zero when the nonce line is missing or wrong.
Components: `tests_passed` (fraction), `format` (a code block was found and it compiles).
"""

from __future__ import annotations

import dataclasses
import json
import math
import secrets
from importlib import resources
from typing import Any

from tracerl.sandbox import Limits, Sandbox, default_sandbox
from tracerl.verifiers.base import AuditCase, VerifierResult, rejected, task_field, text_of
from tracerl.verifiers.extract import extract_code

_GRADER: str | None = None


def grader_source() -> str:
    global _GRADER
    if _GRADER is None:
        _GRADER = resources.files("tracerl.verifiers").joinpath("_grader.py").read_text()
    return _GRADER


def same_value(actual: Any, expected: Any, tol: float | None = None) -> bool:
    """Strict structural equality of JSON data: bool is not int, lists match in length and order,
    floats within `tol` (relative and absolute) when given, else exactly."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(actual) is type(expected) and actual == expected
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        if not (math.isfinite(actual) and math.isfinite(expected)):
            return False
        if tol is None:
            return actual == expected
        return math.isclose(actual, expected, rel_tol=tol, abs_tol=tol)
    if isinstance(expected, (list, tuple)) and isinstance(actual, list):
        return len(actual) == len(expected) and all(same_value(a, e, tol) for a, e in zip(actual, expected))
    if isinstance(expected, dict) and isinstance(actual, dict):
        return actual.keys() == expected.keys() and all(same_value(actual[k], expected[k], tol) for k in expected)
    return type(actual) is type(expected) and actual == expected


def _same_stdout(actual: str, expected: str) -> bool:
    def norm(s: str) -> list[str]:
        return [line.rstrip() for line in s.strip("\n").splitlines()]
    return norm(actual) == norm(expected)


class UnitTestVerifier:
    """Score a program against hidden tests in the sandbox. See the module docstring."""

    name, revision = "unit_tests", "1"
    components, primary = ("tests_passed", "format"), "tests_passed"

    def __init__(self, *, sandbox: Sandbox | None = None, timeout_s: float = 2.0,
                 memory_bytes: int = 512 * 2**20, stdout_bytes: int = 64 * 2**10) -> None:
        self._sandbox = sandbox
        self.timeout_s, self.memory_bytes, self.stdout_bytes = timeout_s, memory_bytes, stdout_bytes

    @property
    def sandbox(self) -> Sandbox:
        return self._sandbox or default_sandbox()

    def verify(self, task: Any, trajectory: Any) -> VerifierResult:
        code = extract_code(text_of(trajectory))
        if not code.ok:
            return rejected(self.components, code.reason)
        tests = list(task_field(task, "tests") or [])
        if not tests:
            raise ValueError("UnitTestVerifier needs a task with a non-empty `tests` list")
        inputs = []
        for t in tests:
            if "expr" in t:
                inputs.append({"kind": "expr", "expr": t["expr"]})
            elif "stdin" in t and "stdout" in t:
                inputs.append({"kind": "stdio", "stdin": t["stdin"]})
            else:
                raise ValueError(f"a test must have 'expr'+'expected' or 'stdin'+'stdout', got keys {sorted(t)}")
        run = run_grader(self.sandbox, code.value, inputs, timeout_s=self.timeout_s,
                         memory_bytes=self.memory_bytes, stdout_bytes=self.stdout_bytes)
        raw: dict[str, Any] = {"sandbox_status": run.status, "sandbox_reason": run.reason}
        if run.status == "crash":
            raise RuntimeError(f"the sandbox failed while grading (infrastructure, not the policy): {run.reason}")
        if run.results is None:
            return rejected(self.components, run.why, **raw)
        results = run.results
        verdicts = []
        for test, result in zip(tests, results):
            if not result.get("ran"):
                verdicts.append({"passed": False, "reason": result.get("error", "did not run")})
            elif "expr" in test:
                ok = same_value(result.get("value"), test["expected"], test.get("tol"))
                verdicts.append({"passed": ok, "reason": "" if ok else f"{test['expr']} returned {result.get('value')!r:.200}"})
            else:
                ok = _same_stdout(result.get("output", ""), test["stdout"])
                verdicts.append({"passed": ok, "reason": "" if ok else "wrong output"})
        passed = sum(v["passed"] for v in verdicts)
        raw.update(tests=verdicts, passed=passed, total=len(tests), syntax_ok=run.syntax_ok,
                   reason="" if passed == len(tests) else
                   f"{passed}/{len(tests)} tests passed; first failure: "
                   f"{next(v['reason'] for v in verdicts if not v['passed'])[:160]}")
        return VerifierResult({"tests_passed": passed / len(tests), "format": float(run.syntax_ok)}, raw)

    def audit_cases(self) -> list[AuditCase]:
        from tracerl.verifiers.code_attacks import unit_test_audit_cases
        return unit_test_audit_cases()


@dataclasses.dataclass
class GraderRun:
    status: str  # the sandbox's status ("crash": the sandbox itself failed)
    reason: str | None
    results: list[dict] | None  # one per test, or None when the grader did not finish (see `why`)
    syntax_ok: bool = False
    why: str = ""


def run_grader(sandbox: Sandbox, code: str, inputs: list[dict], *, timeout_s: float, memory_bytes: int,
               stdout_bytes: int) -> GraderRun:
    """Run `_grader.py` on `code` for `inputs` ({"kind": "expr", "expr": ...} or {"kind": "stdio",
    "stdin": ...}). Each test runs in its own child of the grader; results come back over a pipe
    the candidate's process holds only for its own test, and the grader's report carries the
    per-run nonce, which no process that ran candidate code could ever read."""
    nonce = secrets.token_hex(16)
    spec = {"tests": inputs, "timeout_s": timeout_s, "stdout_bytes": stdout_bytes}
    budget = timeout_s * len(inputs) + 1.5
    limits = Limits(wall_s=budget, cpu_s=budget, memory_bytes=memory_bytes, nproc=64, nofile=256,
                    output_bytes=(stdout_bytes + 8192) * (len(inputs) + 1))
    run = sandbox.run(grader_source(), stdin=nonce, limits=limits,
                      files={"solution.py": code, "tests.json": json.dumps(spec)})
    status = str(run.status)
    if status == "crash":
        return GraderRun(status, run.reason, None, why=f"sandbox fault: {run.reason}")
    report = _last_json_line(run.stdout)
    if report is None or report.get("nonce") != nonce:
        return GraderRun(status, run.reason, None, why="the grader did not finish: no nonce line after the last "
                         "test (the program exited early, killed the grader, or forged output)")
    results = report.get("results")
    if not (isinstance(results, list) and len(results) == len(inputs) and all(isinstance(r, dict) for r in results)):
        return GraderRun(status, run.reason, None, why="the grader's report does not hold one result per test")
    return GraderRun(status, run.reason, results, syntax_ok=report.get("syntax_ok") is True)


def _last_json_line(stdout: str) -> dict | None:
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        return None
    try:
        value = json.loads(lines[-1])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
