"""search_qa: multi-hop questions over a generated knowledge base, answered through BM25 search."""

from __future__ import annotations

import json
import random

from tracerl.contract.task import Task
from tracerl.envs import _audit
from tracerl.envs._generation import generate_tasks
from tracerl.envs.base import EnvSpec, register_env
from tracerl.envs.search_qa.env import NAME, REVISION, VERIFIER, SearchQAEnv, make_expert
from tracerl.envs.search_qa.kb import LEVELS, make_kb, make_question

DIFFICULTY_RANGE = (0.0, 1.0)
EXPERT_ERROR_RATE = 0.2


def generate(split: str, n: int, seed: int = 0, difficulty=None) -> list[Task]:
    """`n` tasks of `split`. A task is held out iff the hash of its content (knowledge base and
    question) falls in the held-out bucket, so the splits never share a task. Difficulty in [0, 1]:
    0 one hop, 0.5 two hops, 1 two hops over a larger base."""

    def make(rng: random.Random, level: int) -> tuple[str, dict]:
        kb = make_kb(rng, level)
        q = make_question(rng, kb, level)
        key = json.dumps({"kb": kb, "q": q["question"]}, sort_keys=True)
        meta = {"kb": kb, "queries": q["queries"], "answer_type": q["type"], "hops": len(q["queries"])}
        return key, {"source": NAME, "source_revision": REVISION, "prompt": q["question"],
                     "answer": q["answer"], "metadata": meta}

    return generate_tasks(NAME, split, n, seed, difficulty, max(LEVELS), make)


def audit_cases() -> list[dict]:
    """Outputs that must not be rewarded (reward 0) and known-good ones (reward 1), on a fixed task.
    Each case: task, actions (the policy's turns), rewarded, attack (the trick, in a few words)."""
    task = generate("train", 1, seed=7, difficulty=0.5)[0]
    kb, ans = task.metadata["kb"], task.answer
    others = [c for c in kb["cities"] if c != ans]
    bad = [
        (f"<answer>{' '.join(kb['cities'])}</answer>", "list every candidate city"),
        (f"<answer>{ans} or {others[0]}</answer>", "hedge between two answers"),
        (f"<answer>{others[0]}</answer>", "a plausible wrong entity"),
        ("<answer></answer>", "empty answer"),
        (f"<answer>{task.metadata['queries'][1].split()[0]}</answer>", "stop at the intermediate hop"),
        (f"<search>{ans}</search>", "search forever, never answer"),
        (ans, "the right name outside the answer tag"),
    ]
    good = [(f"<answer>{ans}</answer>", "exact"), (f"<answer> The {ans.upper()}. </answer>", "case, article, punctuation")]
    return ([{"task": task, "actions": [a], "rewarded": False, "attack": why} for a, why in bad]
            + [{"task": task, "actions": [a], "rewarded": True, "attack": why} for a, why in good])


SPEC = register_env(EnvSpec(
    name=NAME, revision=REVISION, make=SearchQAEnv, generate=generate,
    expert=make_expert(EXPERT_ERROR_RATE), reward_weights={"correct": 1.0, "invalid_actions": -0.1},
    stop_strings=("</search>", "</answer>"), verifier=VERIFIER,
    special_tokens=("<search>", "</search>", "<answer>", "</answer>", "<result>", "</result>",
                    "<error>", "</error>"),
    tools=("search",),
    description="multi-hop QA over a per-task knowledge base of fictional entities; BM25 search, budget 3",
))

audit = _audit.register(SPEC, audit_cases)  # `tracerl audit` builder: (verifier, cases)

__all__ = ["SPEC", "SearchQAEnv", "audit_cases", "generate", "make_expert", "DIFFICULTY_RANGE"]
