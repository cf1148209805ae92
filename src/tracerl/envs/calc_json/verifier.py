"""The calc_json verifier: exactly one `<answer>` block in the final turn, its body an exact integer match."""

from __future__ import annotations

import re

from tracerl.envs._verify import EnvVerifier
from tracerl.envs.math_tool.verifier import check_answer
from tracerl.verifiers.registry import register_verifier

NAME = "calc_json.answer"
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def score(text: str, answer: str) -> dict[str, float]:
    """`correct`: the one answer block's body is the integer; `format`: there is exactly one block."""
    blocks = _ANSWER.findall(text)
    if len(blocks) != 1:  # none, or a second answer to hedge with
        return {"correct": 0.0, "format": 0.0}
    return {"correct": check_answer(blocks[0], answer), "format": 1.0}


class CalcJsonAnswer(EnvVerifier):
    """Evidence: the final turn's text (str)."""

    name, revision, env = NAME, "calc_json-answer-1", "calc_json"
    components, primary = ("correct", "format"), "correct"

    def score(self, task, evidence):
        text = str(evidence)
        blocks = _ANSWER.findall(text)
        return score(text, task.answer), {"answer": (blocks[0] if blocks else "")[:200]}


register_verifier(NAME, CalcJsonAnswer, replace=True)
