"""The reasoning_gym verifier: tracerl's guard, then the package scorer, which must return 1.0.

Evidence: the answer body (str), or None when the episode ended at the invalid-action limit.
Partial scores the package gives are kept in the raw output and never become reward. A scorer that
raises propagates: the environment turns it into an infra failure (never a reward).
"""

from __future__ import annotations

from tracerl.envs._verify import EnvVerifier
from tracerl.verifiers.registry import register_verifier

NAME = "reasoning_gym.guarded_scorer"


class ReasoningGymGuardedScorer(EnvVerifier):
    name, revision, env = NAME, "reasoning_gym-guarded-scorer-1", "reasoning_gym"
    components, primary = ("correct",), "correct"

    def __init__(self, scorer=None) -> None:
        if scorer is None:
            from tracerl.envs.reasoning_gym.env import score as scorer
        self._score = scorer

    def score(self, task, evidence):
        if evidence is None:
            return {"correct": 0.0}, {"reason": "no answer"}
        meta = task.metadata
        correct, raw = self._score(meta["family"], int(meta["level"]), str(evidence), meta["entry"])
        return {"correct": float(correct)}, {"scorer": raw}


register_verifier(NAME, ReasoningGymGuardedScorer, replace=True)
