"""The math_tool verifier: the final `<answer>` body against the task's integer (exact match)."""

from __future__ import annotations

import re

from tracerl.envs._verify import EnvVerifier
from tracerl.verifiers.registry import register_verifier

NAME = "math_tool.answer"
_INT = re.compile(r"-?\d{1,12}", re.ASCII)  # ASCII digits only: int() also reads other scripts


def check_answer(body: str, expected: str) -> float:
    """Exact integer match; anything that is not a plain integer scores 0."""
    body = body.strip()
    return 1.0 if _INT.fullmatch(body) and int(body) == int(expected) else 0.0


class MathToolAnswer(EnvVerifier):
    """Evidence: the answer body (str). `correct` is the exact integer match; `format` is 1 (the
    episode ended with a well-formed answer, which is why the verifier is called at all)."""

    name, revision, env = NAME, "math_tool-answer-1", "math_tool"
    components, primary = ("correct", "format"), "correct"

    def score(self, task, evidence):
        body = str(evidence)
        return {"correct": check_answer(body, task.answer), "format": 1.0}, {"answer": body[:200]}


register_verifier(NAME, MathToolAnswer, replace=True)
