"""`arith`: one-turn sums in plain words, for pretrained instruct models that know no tool grammar.

The policy answers "What is 7 + 5?" in its own words; the verifier takes as the answer the first
integer after the reply's first `=` or "equals" (the model's own statement of the result), else the
reply's last integer (`correct`); `format` is 1 when that answer is correct and the reply is short
(at most 12 words), so a policy is not paid for rambling. Tasks are held out by content: the pairs whose
`(7a + b) mod 6 == 0` are never trained on. Deterministic given (task, seed); single turn, so every
reply ends the episode with reason `eos`.

What it departs from: the lenient rule accepts a reply that lists numbers and happens to end on the
right one (`7 8 9 10 11 12` for 7 + 5 scores `correct`); the recipe weighs only `correct`, so the
reward is as loose as that rule, which is stated here rather than hidden.
"""

from __future__ import annotations

import hashlib
import random
import re

from tracerl.contract.roles import TerminalReason
from tracerl.contract.task import Task
from tracerl.envs._verify import grade
from tracerl.envs.arith.verifier import NAME as VERIFIER, extract, score
from tracerl.envs.base import EnvSpec, Message, Step, register_env

REVISION = "arith-env-1"
SYSTEM = "Answer with the number."
_INT = re.compile(r"-?\d+")
DIFFICULTY_RANGE = (0.0, 1.0)


def _pairs(split: str, difficulty) -> list[tuple[int, int]]:
    lo, hi = (difficulty, difficulty) if isinstance(difficulty, (int, float)) else (difficulty or (0.0, 1.0))
    top = 5 + round(15 * float(hi))  # difficulty 0: operands up to 5; 1: up to 20
    bottom = 1 + round(4 * float(lo))
    pairs = [(a, b) for a in range(bottom, top + 1) for b in range(1, top + 1)]
    return [p for p in pairs if ((7 * p[0] + p[1]) % 6 == 0) == (split == "heldout")]


def generate(split: str, n: int, seed: int = 0, difficulty=None) -> list[Task]:
    pairs = _pairs(split, difficulty)
    random.Random(f"arith:{seed}:{split}").shuffle(pairs)
    return [Task(id=f"arith-{a}+{b}", source="arith", source_revision=REVISION, prompt=f"What is {a} + {b}?",
                 answer=str(a + b), split=split) for a, b in pairs[:n]]


class ArithEnv:
    name = "arith"
    revision = REVISION

    def __init__(self):
        self.task: Task | None = None
        self.reply: str | None = None

    def reset(self, task: Task, seed: int) -> list[Message]:
        self.task, self.reply = task, None
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": str(task.prompt)}]

    def step(self, action_text: str) -> Step:
        self.reply = action_text
        comps, info = grade(VERIFIER, self.task, action_text)
        return Step(terminated=True, terminal_reason=TerminalReason.EOS, reward_components=comps,
                    info={"answer": extract(action_text) or "", **info})

    def state_hash(self) -> str:
        return hashlib.sha256(repr((self.task.id if self.task else None, self.reply)).encode()).hexdigest()[:16]


def expert(task: Task, observations: list[str], rng: random.Random, *, error_rate: float = 0.0) -> str:
    a, b = (int(x) for x in _INT.findall(str(task.prompt))[:2])
    value = a + b + (rng.choice((-1, 1)) if rng.random() < error_rate else 0)
    return f"{a} + {b} = {value}"


SPEC = register_env(EnvSpec(
    name="arith", revision=REVISION, make=ArithEnv, generate=generate, expert=expert,
    reward_weights={"correct": 1.0, "format": 0.0}, stop_strings=(), tools=(), verifier=VERIFIER,
    description="One-turn sums answered in plain words (for pretrained instruct models).",
))

__all__ = ["SPEC", "ArithEnv", "expert", "extract", "generate", "score"]
