"""The search_qa verifier: normalized exact match of the answer, and the episode's invalid-action count.

Evidence: `{"answer": str | None, "invalid_actions": int}` (None: the episode ended without an
answer, at the invalid-action limit).
"""

from __future__ import annotations

from tracerl.envs._verify import EnvVerifier
from tracerl.envs.search_qa.kb import normalize
from tracerl.verifiers.registry import register_verifier

NAME = "search_qa.exact_entity"


class SearchQAExactEntity(EnvVerifier):
    name, revision, env = NAME, "search_qa-exact-entity-1", "search_qa"
    components, primary = ("correct", "invalid_actions"), "correct"

    def score(self, task, evidence):
        body = evidence.get("answer")
        correct = float(body is not None and bool(normalize(body)) and normalize(body) == normalize(str(task.answer)))
        return {"correct": correct, "invalid_actions": float(evidence.get("invalid_actions", 0))}, {}


register_verifier(NAME, SearchQAExactEntity, replace=True)
