"""The swe verifier: the hidden tests on a fresh copy of the edited repository, in the sandbox.

Evidence: `{"files": the repository at the end of the episode}` (None when there is none). The
repository's source is the module calc.py; the grader takes calc.py as the policy left it and
nothing else of the tree (its test files, or files it added, never reach the grader), and runs the
task's hidden tests (data kept with the task, never in the repository) through the unit-test
verifier (`tracerl.verifiers.UnitTestVerifier`: a pristine copy per test, host-side comparison of
plain values, a per-run nonce). So editing or deleting the visible tests, `exit 0` at import,
special-casing the visible inputs and objects equal to everything all score 0.
`tests` is the fraction of hidden tests passed; `success` is 1 when all pass.
"""

from __future__ import annotations

from tracerl.envs._verify import EnvVerifier
from tracerl.verifiers.registry import register_verifier

NAME = "swe.hidden_tests"


class SWEHiddenTests(EnvVerifier):
    name, revision, env = NAME, "swe-hidden-tests-1", "swe"
    components, primary = ("success", "tests"), "success"

    def __init__(self, sandbox=None, timeout_s: float = 1.0) -> None:
        from tracerl.verifiers import UnitTestVerifier

        self._inner = UnitTestVerifier(sandbox=sandbox, timeout_s=timeout_s)

    def score(self, task, evidence):
        source = ((evidence or {}).get("files") or {}).get("calc.py")
        if source is None:
            return {"success": 0.0, "tests": 0.0}, {"reason": "calc.py is missing"}
        result = self._inner.verify({"tests": task.tests["hidden"]}, f"<code>{source}</code>")
        frac = float(result.components["tests_passed"])
        return {"success": float(frac >= 1.0), "tests": frac}, {"reason": result.reason[:200],
                                                              "passed": result.raw.get("passed", 0)}

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if callable(close):
            close()


register_verifier(NAME, SWEHiddenTests, replace=True)
