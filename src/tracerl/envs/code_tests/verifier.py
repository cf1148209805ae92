"""The code_tests verifier: the submitted function on the task's hidden tests, through the unit-test
verifier (`tracerl.verifiers.UnitTestVerifier`: pristine copy per test, host-side comparison, nonce).

Evidence: the submitted code (str), or None when the episode ended at the invalid-action limit.
`tests` is the fraction of hidden tests passed. A sandbox fault raises RuntimeError (the
environment makes it an infra failure).
"""

from __future__ import annotations

from tracerl.envs._verify import EnvVerifier
from tracerl.verifiers.registry import register_verifier

NAME = "code_tests.hidden_tests"


class CodeTestsHiddenTests(EnvVerifier):
    name, revision, env = NAME, "code_tests-hidden-tests-1", "code_tests"
    components, primary = ("tests",), "tests"

    def __init__(self, sandbox=None, timeout_s: float = 0.5) -> None:
        from tracerl.verifiers import UnitTestVerifier

        self._inner = UnitTestVerifier(sandbox=sandbox, timeout_s=timeout_s)
        self.revision = f"code_tests-hidden-tests-1+{self._inner.name}-{self._inner.revision}"

    def score(self, task, evidence):
        if evidence is None:
            return {"tests": 0.0}, {"reason": "no submission"}
        tests = [{"expr": f"f({x!r})", "expected": y} for x, y in task.tests["hidden"]]
        result = self._inner.verify({"tests": tests}, f"<code>{evidence}</code>")
        return ({"tests": result.components["tests_passed"]},
                {"passed": result.raw.get("passed", 0), "total": len(tests), "reason": result.reason[:200]})

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if callable(close):
            close()


register_verifier(NAME, CodeTestsHiddenTests, replace=True)
