"""Expert demonstrations for the SFT cold start, played through the real environment.

The expert's actions go through `env.step`, so every observation in a demonstration is what the
tool really returned. A demonstration keeps text turns until the tokenizer exists, then is
tokenized with the same roles the agent loop uses (only ACTION tokens carry loss).

An episode that does not end within `env.max_turns` (truncated) or ends in an infrastructure
failure is no demonstration and is dropped; `DemoCount` says how many were kept of how many and
why the rest were not, and the run prints it before SFT (a guide whose command silently trained on 4
of its 80 demonstrations is how this came to be counted).
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
class DemoCount:
    """How many tasks the expert played, how many became demonstrations, and why the rest did not."""

    offered: int = 0
    kept: int = 0
    truncated: int = 0  # the episode did not end within max_turns
    infra_failure: int = 0
    max_turns: int = 0

    def line(self) -> str:
        """`80 of 80 demonstrations used`, or which were dropped, why, and the fix."""
        out = f"{self.kept} of {self.offered} demonstrations used"
        why = []
        if self.truncated:
            why.append(f"{self.truncated} did not end within env.max_turns={self.max_turns} (raise env.max_turns "
                       "to keep them)")
        if self.infra_failure:
            why.append(f"{self.infra_failure} ended in an infrastructure failure of the environment")
        return out + ("; dropped: " + ", ".join(why) if why else "")


@dataclasses.dataclass
class Demo:
    task: Task
    messages: list[Message]
    turns: list[tuple[str, str | None]]  # (action text, observation text or None)
    reward: float
    native: object = None  # envs.native_tools.NativeTools in native tool mode (rendered by rollout/tool_turns.py)


def collect_demos(spec: EnvSpec, tasks: list[Task], *, seed: int, max_turns: int,
                  expert_kwargs: dict | None = None) -> list[Demo]:
    return collect_demos_counted(spec, tasks, seed=seed, max_turns=max_turns, expert_kwargs=expert_kwargs)[0]


def collect_demos_counted(spec: EnvSpec, tasks: list[Task], *, seed: int, max_turns: int,
                          expert_kwargs: dict | None = None) -> tuple[list[Demo], DemoCount]:
    """The expert's demonstrations on `tasks` and their count: kept of offered, and why any were dropped."""
    count = DemoCount(offered=len(tasks), max_turns=max_turns)
    rng = random.Random(f"demos:{seed}")
    accepted = inspect.signature(spec.expert).parameters
    kwargs = {k: v for k, v in (expert_kwargs or {}).items() if k in accepted}
    demos = []
    for i, task in enumerate(tasks):
        env = spec.make()
        messages = env.reset(task, seed + i)
        turns, observations, reward = [], [], 0.0
        ended, infra = False, False
        for _ in range(max_turns):
            action = spec.expert(task, observations, rng, **kwargs)
            step = env.step(action)
            turns.append((action, None if step.terminated else step.observation))
            if step.terminated:
                infra = step.terminal_reason == TerminalReason.INFRA_FAILURE
                ended = not infra
                reward = sum(spec.reward_weights.get(k, 0.0) * v for k, v in step.reward_components.items())
                break
            observations.append(step.observation or "")
        if ended:  # a truncated or infrastructure-failed episode is no demonstration
            demos.append(Demo(task, messages, turns, reward, getattr(env, "native_tools", None)))
        count.infra_failure += infra
        count.truncated += not ended and not infra
    count.kept = len(demos)
    return demos, count


def demo_texts(demos: list[Demo]) -> list[str]:
    """Every text a demonstration contains: the tokenizer's training corpus."""
    out = []
    for d in demos:
        out += [m["content"] for m in d.messages]
        if d.native is not None:  # the template shows the tool schemas to the model
            out.append(d.native.tools_text())
        for action, obs in d.turns:
            out.append(action)
            if obs:
                out.append(obs)
    return out


def tokenize_demo(tokenizer, demo: Demo) -> tuple[list[int], list[TokenRole]]:
    if demo.native is not None:
        from tracerl.rollout.tool_turns import tokenize_native_demo

        return tokenize_native_demo(tokenizer, demo)
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
