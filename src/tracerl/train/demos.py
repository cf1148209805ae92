"""Expert demonstrations for the SFT cold start, played through the real environment.

The expert's actions go through `env.step`, so every observation in a demonstration is what the
tool really returned. A demonstration keeps text turns until the tokenizer exists, then is
tokenized with the same roles the agent loop uses (only ACTION tokens carry loss).
"""

from __future__ import annotations

import dataclasses
import inspect
import random

from tracerl.contract.roles import TerminalReason, TokenRole
from tracerl.contract.task import Task
from tracerl.envs.base import EnvSpec, Message
from tracerl.rollout.render import render_observation, render_prompt


@dataclasses.dataclass
class Demo:
    task: Task
    messages: list[Message]
    turns: list[tuple[str, str | None]]  # (action text, observation text or None)
    reward: float


def collect_demos(spec: EnvSpec, tasks: list[Task], *, seed: int, max_turns: int,
                  expert_kwargs: dict | None = None) -> list[Demo]:
    rng = random.Random(f"demos:{seed}")
    accepted = inspect.signature(spec.expert).parameters
    kwargs = {k: v for k, v in (expert_kwargs or {}).items() if k in accepted}
    demos = []
    for i, task in enumerate(tasks):
        env = spec.make()
        messages = env.reset(task, seed + i)
        turns, observations, reward = [], [], 0.0
        ended = False
        for _ in range(max_turns):
            action = spec.expert(task, observations, rng, **kwargs)
            step = env.step(action)
            turns.append((action, None if step.terminated else step.observation))
            if step.terminated:
                ended = step.terminal_reason != TerminalReason.INFRA_FAILURE
                reward = sum(spec.reward_weights.get(k, 0.0) * v for k, v in step.reward_components.items())
                break
            observations.append(step.observation or "")
        if ended:  # a truncated or infrastructure-failed episode is no demonstration
            demos.append(Demo(task, messages, turns, reward))
    return demos


def demo_texts(demos: list[Demo]) -> list[str]:
    """Every text a demonstration contains: the tokenizer's training corpus."""
    out = []
    for d in demos:
        out += [m["content"] for m in d.messages]
        for action, obs in d.turns:
            out.append(action)
            if obs:
                out.append(obs)
    return out


def tokenize_demo(tokenizer, demo: Demo) -> tuple[list[int], list[TokenRole]]:
    ids, roles = render_prompt(tokenizer, demo.messages)
    for action, obs in demo.turns:
        a = list(tokenizer(action, add_special_tokens=False)["input_ids"])
        ids += a
        roles += [TokenRole.ACTION] * len(a)
        if obs:  # as the agent loop renders it: the template's tool role when it has one
            o, o_roles = render_observation(tokenizer, obs)
            ids += o
            roles += o_roles
    return ids, roles
