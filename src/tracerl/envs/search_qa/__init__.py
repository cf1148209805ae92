"""search_qa: multi-hop questions over a generated knowledge base, answered through BM25 search."""

from __future__ import annotations

import hashlib
import json
import random

from tracerl.envs.base import EnvSpec, register_env
from tracerl.envs.search_qa.env import NAME, REVISION, SearchQAEnv, make_expert
from tracerl.envs.search_qa.kb import LEVELS, make_kb, make_question, split_of
from tracerl.errors import UserError
from tracerl.tasks.task import SPLITS, Task

DIFFICULTY_RANGE = (min(LEVELS), max(LEVELS))
EXPERT_ERROR_RATE = 0.2


def generate(split: str, n: int, seed: int = 0, difficulty: float | None = None) -> list[Task]:
    """`n` tasks of `split`. A task belongs to the held-out split iff the hash of its content
    (knowledge base and question) falls in the held-out bucket, so the splits never share a task."""
    if split not in SPLITS:
        raise UserError(f"unknown split {split!r}; use one of {SPLITS}")
    if difficulty is not None and round(difficulty) not in LEVELS:
        raise UserError(f"search_qa difficulty {difficulty!r} is out of range; use {DIFFICULTY_RANGE}")
    tasks: list[Task] = []
    seen: set[str] = set()
    i = 0
    while len(tasks) < n:
        if i > 100 * n + 1000:
            raise UserError(f"search_qa has only {len(tasks)} distinct {split} tasks at difficulty {difficulty}; ask for fewer")
        rng = random.Random(f"{NAME}:{seed}:{i}")
        i += 1
        level = round(difficulty) if difficulty is not None else rng.choice(LEVELS)
        kb = make_kb(rng, level)
        q = make_question(rng, kb, level)
        key = json.dumps({"kb": kb, "q": q["question"]}, sort_keys=True)
        if split_of(key) != split or key in seen:
            continue
        seen.add(key)
        tasks.append(Task(
            id=f"{NAME}-{hashlib.sha256(key.encode()).hexdigest()[:12]}", source=NAME,
            source_revision=REVISION, split=split, prompt=q["question"], answer=q["answer"],
            difficulty=float(level),
            metadata={"kb": kb, "queries": q["queries"], "answer_type": q["type"], "hops": len(q["queries"])},
        ))
    return tasks


def audit_cases() -> list[dict]:
    """Outputs that must not be rewarded (reward 0) and known-good ones (reward 1), on fixed tasks."""
    task = generate("train", 1, seed=7, difficulty=1)[0]
    kb, ans = task.metadata["kb"], task.answer
    others = [c for c in kb["cities"] if c != ans]
    bad = [
        f"<answer>{' '.join(kb['cities'])}</answer>",  # list every candidate
        f"<answer>{ans} or {others[0]}</answer>",  # hedge
        f"<answer>{others[0]}</answer>",  # plausible wrong entity
        "<answer></answer>",  # empty
        f"<answer>{task.metadata['queries'][1].split()[0]}</answer>",  # the intermediate hop
        f"<search>{ans}</search>",  # never answers
        f"{ans}",  # the right name outside the answer tag
    ]
    good = [f"<answer>{ans}</answer>", f"<answer> The {ans.upper()}. </answer>"]
    return ([{"task": task, "actions": [a], "rewarded": False} for a in bad]
            + [{"task": task, "actions": [a], "rewarded": True} for a in good])


SPEC = register_env(EnvSpec(
    name=NAME, revision=REVISION, make=SearchQAEnv, generate=generate,
    expert=make_expert(EXPERT_ERROR_RATE), reward_weights={"correct": 1.0},
    stop_strings=("</search>", "</answer>"),
    special_tokens=("<search>", "</search>", "<answer>", "</answer>", "<result>", "</result>",
                    "<error>", "</error>"),
    tools=("search",),
    description="multi-hop QA over a per-task knowledge base of fictional entities; BM25 search, budget 3",
))

__all__ = ["SPEC", "SearchQAEnv", "audit_cases", "generate", "make_expert", "DIFFICULTY_RANGE"]
