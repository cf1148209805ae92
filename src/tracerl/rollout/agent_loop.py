"""The multi-turn agent loop: the policy writes, the environment answers, tokens keep their roles.

Per episode: the initial messages are rendered with the chat template (PROMPT / TEMPLATE); the
policy's turn is appended exactly as sampled (ACTION, with behavior log-probs, policy version
and a hash of the sampled ids); the environment parses the decoded action; an observation is
tokenized on its own and appended (OBSERVATION). Actions are never re-tokenized. The episode ends
with a TerminalReason: the env's (eos, env_success, env_failure, infra_failure) or the loop's
budgets (max_turns, max_tokens). Episodes of one call are batched through the engine turn by turn.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import time
import uuid

import torch

from tracerl.contract import TerminalReason, TokenRole, Trajectory, ids_sha256, validate
from tracerl.envs.base import EnvSpec
from tracerl.rollout.engine import TorchEngine
from tracerl.rollout.render import encode_observation, render_prompt
from tracerl.tasks.task import Task


@dataclasses.dataclass
class LoopBudgets:
    max_turns: int = 4
    max_tokens: int = 256
    max_new_tokens: int = 64


@dataclasses.dataclass
class _Episode:
    task: Task
    env: object
    traj: Trajectory
    turns: int = 0
    done: bool = False


def _zero_components(spec: EnvSpec) -> dict[str, float]:
    return {k: 0.0 for k in spec.reward_weights}


def _finish(ep: _Episode, spec: EnvSpec, reason: TerminalReason, components: dict[str, float] | None) -> None:
    comps = _zero_components(spec)
    if components and reason != TerminalReason.INFRA_FAILURE:
        comps.update(components)
    ep.traj.set_reward(comps, spec.reward_weights)
    ep.traj.finish(reason)
    ep.traj.wall_end = time.time()
    ep.done = True


def run_episodes(engine: TorchEngine, spec: EnvSpec, tasks: list[Task], group_ids: list[str], *,
                 budgets: LoopBudgets, sampling: dict, policy_version: int, seed: int,
                 tokenizer_hashes: dict[str, str] | None = None,
                 generator: torch.Generator | None = None,
                 entropy_out: dict[str, list[float]] | None = None) -> list[Trajectory]:
    """Play one episode per task (repeat a task to form a group) and return validated trajectories.

    `entropy_out`, when given, receives each trajectory's per-action-token entropy of the sampling
    distribution (a diagnostic, not part of the contract), keyed by trajectory id.
    """
    tok = engine.tokenizer
    episodes: list[_Episode] = []
    for i, (task, gid) in enumerate(zip(tasks, group_ids)):
        env = spec.make()
        reset_seed = random.Random(f"{seed}:{i}").randrange(2**31)
        messages = env.reset(task, reset_seed)
        ids, roles = render_prompt(tok, messages)
        traj = Trajectory(trajectory_id=uuid.uuid4().hex[:16], group_id=gid, task_id=task.id,
                          env_name=spec.name, task_source=task.source, task_revision=task.source_revision,
                          split=task.split, env_revision=spec.revision, reset_seed=reset_seed,
                          initial_state_hash=env.state_hash(), sampling=dict(sampling),
                          wall_start=time.time(), verifier_name=f"{spec.name}.verify",
                          verifier_revision=spec.revision, **(tokenizer_hashes or {}))
        _append_by_role(traj, ids, roles)
        traj.add_span("prompt", 0, len(ids))
        episodes.append(_Episode(task, env, traj))

    while True:
        active = [ep for ep in episodes if not ep.done]
        if not active:
            break
        room = [min(budgets.max_new_tokens, budgets.max_tokens - len(ep.traj)) for ep in active]
        for ep, r in zip(active, room):
            if r <= 0:
                _finish(ep, spec, TerminalReason.MAX_TOKENS, None)
        active = [ep for ep, r in zip(active, room) if r > 0]
        room = [r for r in room if r > 0]
        if not active:
            break
        samples = engine.generate([ep.traj.token_ids for ep in active], max_new_tokens=room,
                                  stop_strings=spec.stop_strings, stop_token_ids=[tok.eos_token_id],
                                  generator=generator, **sampling)
        for ep, sample in zip(active, samples):
            if entropy_out is not None:
                entropy_out.setdefault(ep.traj.trajectory_id, []).extend(sample.entropies)
            _play_turn(ep, sample, spec, tok, budgets, policy_version)
    return [validate(ep.traj) for ep in episodes]


def _append_by_role(traj: Trajectory, ids: list[int], roles: list[TokenRole]) -> None:
    start = 0
    for j in range(1, len(ids) + 1):
        if j == len(ids) or roles[j] != roles[start]:
            traj.append(ids[start:j], roles[start])
            start = j


def _play_turn(ep: _Episode, sample, spec: EnvSpec, tok, budgets: LoopBudgets, policy_version: int) -> None:
    traj = ep.traj
    s, e = traj.append(sample.token_ids, TokenRole.ACTION, logprobs=sample.logprobs, policy_version=policy_version)
    traj.add_span("action", s, e, sampled_ids_sha256=ids_sha256(sample.token_ids))
    ep.turns += 1
    if sample.finish == "length" and len(traj) >= budgets.max_tokens:
        _finish(ep, spec, TerminalReason.MAX_TOKENS, None)
        return
    text = tok.decode(sample.token_ids, skip_special_tokens=True)
    step = ep.env.step(text)
    info = step.info or {}
    ended_by_policy = sample.finish == "stop" and bool(sample.token_ids) and sample.token_ids[-1] == tok.eos_token_id
    if ended_by_policy and not step.terminated:  # the policy's own EOS is an ending, whatever room is left
        _finish(ep, spec, TerminalReason.EOS, None)
        return
    if step.observation is not None and not step.terminated:
        obs_ids = encode_observation(tok, step.observation)
        if len(traj) + len(obs_ids) >= budgets.max_tokens:  # no room for the answer to it
            _finish(ep, spec, TerminalReason.MAX_TOKENS, None)
            return
        s, e = traj.append(obs_ids, TokenRole.OBSERVATION)
        traj.add_span("observation", s, e, tool_name=info.get("tool"), tool_request=text,
                      tool_status=info.get("tool_status", "invalid_action" if info.get("invalid_action") else None),
                      tool_latency_s=info.get("tool_latency_s"),
                      tool_response_sha256=hashlib.sha256(step.observation.encode()).hexdigest(),
                      state_hash=ep.env.state_hash())
    if step.terminated:
        _finish(ep, spec, step.terminal_reason or TerminalReason.EOS, step.reward_components)
        traj.verifier_output = {k: v for k, v in info.items() if isinstance(v, (str, int, float, bool))}
    elif ep.turns >= budgets.max_turns:
        _finish(ep, spec, TerminalReason.MAX_TURNS, None)
    elif len(traj) >= budgets.max_tokens:
        _finish(ep, spec, TerminalReason.MAX_TOKENS, None)
