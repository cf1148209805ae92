"""The arith verifier: the reply's stated result against the sum (see `tracerl.envs.arith`)."""

from __future__ import annotations

import re

from tracerl.envs._verify import EnvVerifier
from tracerl.verifiers.registry import register_verifier

NAME = "arith.stated_sum"
_INT = re.compile(r"-?\d+")
_STATED = re.compile(r"(?:=|\bequals\b)\s*(-?\d+)")


def extract(reply: str) -> str | None:
    """The reply's answer: the first integer after its first `=` / "equals", else its last integer."""
    stated = _STATED.search(reply)
    if stated:
        return stated.group(1)
    ints = _INT.findall(reply)
    return ints[-1] if ints else None


def score(reply: str, answer: str) -> dict[str, float]:
    got = extract(reply)
    correct = float(got is not None and int(got) == int(answer))
    return {"correct": correct, "format": float(correct > 0 and len(reply.split()) <= 12)}


class ArithStatedSum(EnvVerifier):
    """Evidence: the whole reply (str)."""

    name, revision, env = NAME, "arith-stated-sum-1", "arith"
    components, primary = ("correct", "format"), "correct"

    def score(self, task, evidence):
        reply = str(evidence)
        return score(reply, task.answer), {"answer": extract(reply) or ""}


register_verifier(NAME, ArithStatedSum, replace=True)
