"""The search_qa environment: multi-hop questions over a per-task BM25 index (the Search-R1 pattern).

Grammar: the policy ends each turn with `<search>query</search>` (observation: the top-k passages
inside `<result>…</result>`) or `<answer>text</answer>` (ends the episode, scored by normalized
exact match, `correct`). Searches beyond the per-episode budget are invalid actions, counted in
`invalid_actions` (weight −0.1); the `MAX_INVALID`-th invalid action ends the episode as
`env_failure` (`correct` 0), since a babbling policy would otherwise run into the turn budget, a
truncation that RL masks, and never learn that babbling fails. A failing index is a tool
fault: the episode ends as `infra_failure` and carries no reward.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable

from tracerl.contract.roles import TerminalReason
from tracerl.contract.task import Task
from tracerl.envs._verify import grade
from tracerl.envs.base import Message, Step
from tracerl.envs.grammar import parse_tagged
from tracerl.envs.search_qa.kb import normalize, passages
from tracerl.envs.search_qa.verifier import NAME as VERIFIER

NAME = "search_qa"
REVISION = "search_qa-env-2"  # 2: the MAX_INVALID-th invalid action ends the episode as a failure
TOP_K = 2
SEARCH_BUDGET = 3
MAX_INVALID = 2
SYSTEM = ("Answer the question. To search, write <search>name</search>; you get passages in "
          "<result></result>. Give the final answer as <answer>name</answer>.")

Retriever = Callable[[list[str]], Callable[[str, int], list[str]]]


def bm25_retriever(docs: list[str]) -> Callable[[str, int], list[str]]:
    """A real BM25 index (rank-bm25, BM25Plus so that tiny corpora keep positive term weights)."""
    from rank_bm25 import BM25Plus

    index = BM25Plus([normalize(d).split() for d in docs])

    def search(query: str, k: int) -> list[str]:
        terms = normalize(query).split()
        if not terms:
            return []
        scores = index.get_scores(terms)
        order = sorted(range(len(docs)), key=lambda i: (-scores[i], i))
        return [docs[i] for i in order[:k]]

    return search


class SearchQAEnv:
    name = NAME
    revision = REVISION

    def __init__(self, retriever: Retriever = bm25_retriever, top_k: int = TOP_K,
                 search_budget: int = SEARCH_BUDGET, max_invalid: int | None = MAX_INVALID) -> None:
        self.max_invalid = max_invalid
        self._make_retriever = retriever
        self.top_k = top_k
        self.search_budget = search_budget
        self._task: Task | None = None

    def reset(self, task: Task, seed: int) -> list[Message]:
        self._task = task
        self._seed = seed
        self._searches = 0
        self._invalid = 0
        self._queries: list[str] = []
        self._done = False
        self._search = None  # built lazily so that an index fault surfaces as a step, not a crash
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task.prompt}]

    def step(self, action_text: str) -> Step:
        assert self._task is not None, "call reset() before step()"
        if self._done:
            return _invalid("episode_over", "the episode has ended")
        action = parse_tagged(action_text, ("search", "answer"))
        if action.kind == "invalid":
            return self._invalid_step(action.reason)
        tool, body = action.kind, action.body
        if tool == "answer":
            self._done = True
            comps, info = grade(VERIFIER, self._task, {"answer": body, "invalid_actions": self._invalid})
            return Step(None, True, TerminalReason.EOS, comps, {"tool": "answer", "searches": self._searches, **info})
        if self._searches >= self.search_budget:
            return self._invalid_step(f"search budget of {self.search_budget} is spent; answer now")
        if not body.strip():
            return self._invalid_step("empty search query")
        self._searches += 1
        self._queries.append(body.strip())
        try:
            if self._search is None:
                self._search = self._make_retriever(passages(self._task.metadata["kb"]))
            hits = self._search(body, self.top_k)
        except Exception as err:  # the index is infrastructure: its faults are never the policy's
            self._done = True
            return Step(None, True, TerminalReason.INFRA_FAILURE, {},
                        {"tool": "search", "infra_error": f"{type(err).__name__}: {err}"})
        text = " | ".join(hits) if hits else "no results"
        return Step(f"<result> {text}</result>\n", info={"tool": "search", "tool_status": "ok", "invalid_action": False})

    def _invalid_step(self, why: str) -> Step:
        self._invalid += 1
        step = _invalid("invalid_action", why)
        if self.max_invalid is not None and self._invalid >= self.max_invalid:
            self._done = True
            comps, info = grade(VERIFIER, self._task, {"answer": None, "invalid_actions": self._invalid})
            return Step(step.observation, True, TerminalReason.ENV_FAILURE, comps, {**step.info, **info})
        return step

    def state_hash(self) -> str:
        state = {"task": self._task.id if self._task else None, "queries": self._queries,
                 "done": self._done}
        return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]


def _invalid(kind: str, why: str) -> Step:
    return Step(f"<error>{kind}: {why}</error>\n", info={"invalid_action": True})


def make_expert(error_rate: float = 0.2) -> Callable[[Task, list[str], random.Random], str]:
    """A scripted searcher. With probability `error_rate` (drawn once, on the first turn) it answers
    at once without searching, naming a wrong entity of the right kind, so a model that imitates it
    keeps a habit of guessing that RL can remove; otherwise it issues one query per hop and answers
    with the entity read off the last result. It writes a space after each opening tag, so that a
    name is the same token in its action as in the question and the passages (byte-level BPE gives
    " mozeton" and "mozeton" different tokens)."""

    def expert(task: Task, observations: list[str], rng: random.Random, *, error_rate: float = error_rate) -> str:
        meta = task.metadata
        if not observations:
            if rng.random() < error_rate:
                wrong = [e for e in meta["kb"][meta["answer_type"]] if e != task.answer]
                return f"<answer> {rng.choice(wrong)}</answer>"
            return f"<search> {meta['queries'][0]}</search>"
        if len(observations) < len(meta["queries"]):
            return f"<search> {meta['queries'][len(observations)]}</search>"
        return f"<answer> {task.answer}</answer>"

    return expert
