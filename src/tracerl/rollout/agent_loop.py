"""The multi-turn agent loop: the policy writes, the environment answers, tokens keep their roles.

Per episode: the initial messages are rendered with the chat template (PROMPT / TEMPLATE); the
policy's turn is appended exactly as sampled (ACTION, with behavior log-probs, policy version
and a hash of the sampled ids); the environment parses the decoded action; an observation is
tokenized on its own and appended (OBSERVATION). Actions are never re-tokenized. The episode ends
with a TerminalReason: the env's (eos, env_success, env_failure, infra_failure) or the loop's
budgets (max_turns, max_tokens). Episodes of one call are batched through the engine turn by turn.

Speed without changing a token: the engine session keeps each episode's KV cache across turns (only
the last action token and the observation are fed), and a turn's environment steps (tool calls)
run at once (one thread per episode: rollout/env_threads.py), applied in episode order. A step that does not return
within `LoopBudgets.step_timeout_s` (default 30 s, `env.step_timeout_s`) ends its episode as `infra_failure`
(its thread is abandoned; the other episodes go on: a hung tool costs its episode, not the step). A row whose `generate` fails ends its episode as `infra_failure`
(`engine_error`); a phase past `watchdog_s` is reported by name; with `infra_retries` an
infrastructure failure is played again (fresh reset seed), up to that many times, and the final
episode records its `attempt` and the `retry_lineage` of the ones it replaced (rollout/guard.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import time
import uuid
from collections.abc import Callable

import torch

from tracerl.contract import TerminalReason, TokenRole, Trajectory, ids_sha256, validate
from tracerl.contract.task import Task
from tracerl.envs._verify import declared_verifier
from tracerl.envs.base import EnvSpec
from tracerl.rollout.engine import StatelessSession
from tracerl.rollout.engine_api import Engine
from tracerl.rollout.env_threads import EnvThread, run_all
from tracerl.rollout.guard import Watchdog, generate_rows, infra_reason
from tracerl.rollout.render import observation_bounds, render_observation, render_prompt, render_user_turn
from tracerl.rollout.tool_turns import render_native_prompt, render_tool_turn


@dataclasses.dataclass
class LoopBudgets:
    max_turns: int = 4
    max_tokens: int = 256
    max_new_tokens: int = 64
    step_timeout_s: float | None = 30.0  # an env step (tool call) slower than this is an infra failure (None: none)
    watchdog_s: float | None = None  # a generate or env-step phase longer than this is reported by name
    infra_retries: int = 0  # an infra_failure episode is played again up to this many times

    @classmethod
    def from_env(cls, env) -> LoopBudgets:
        """The budgets of a recipe's `env` section (`config.EnvConfig`)."""
        return cls(env.max_turns, env.max_tokens, env.max_new_tokens, env.step_timeout_s,
                   getattr(env, "watchdog_s", None), getattr(env, "infra_retries", 0))


@dataclasses.dataclass
class _Episode:
    task: Task
    env: object
    traj: Trajectory
    thread: EnvThread | None = None  # where every call on `env` runs (None: the caller's thread)
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


def run_episodes(engine: Engine, spec: EnvSpec, tasks: list[Task], group_ids: list[str], *,
                 budgets: LoopBudgets, sampling: dict, policy_version: int, seed: int,
                 tokenizer_hashes: dict[str, str] | None = None,
                 generator: torch.Generator | None = None,
                 entropy_out: dict[str, list[float]] | None = None,
                 concurrent_steps: bool = True, watchdog: Watchdog | None = None,
                 on_turn: Callable[[], int] | None = None) -> list[Trajectory]:
    """Play one episode per task (repeat a task to form a group) and return validated trajectories.

    `engine` is any `Engine` (rollout/engine_api.py: torch, HF generate, vLLM, remote); an object with
    only `generate` and `tokenizer` is played through a `StatelessSession`.

    `entropy_out`, when given, receives each trajectory's per-action-token entropy of the sampling
    distribution (a diagnostic, not part of the contract), keyed by trajectory id. With
    `concurrent_steps` each episode's env lives on its own thread and a turn's steps run at once;
    without, they run one after another on this thread (and `step_timeout_s` cannot apply).
    `watchdog` (default: one with `budgets.watchdog_s`) names a phase that runs past its budget.

    `on_turn`, when given, is called before every batched policy turn and returns the policy version
    whose weights the engine holds now (an asynchronous rollout worker loads new weights there: a
    partial rollout). When the version changed, the engine session is reopened, so every later token
    is sampled, KV cache included, by the new weights, and each ACTION token keeps the version that
    sampled it.
    """
    wd = watchdog or Watchdog(budgets.watchdog_s)
    kw = dict(budgets=budgets, sampling=sampling, policy_version=policy_version, tokenizer_hashes=tokenizer_hashes,
              generator=generator, entropy_out=entropy_out, concurrent_steps=concurrent_steps, watchdog=wd,
              on_turn=on_turn)
    trajs = _play(engine, spec, tasks, group_ids, seed=seed, **kw)
    for attempt in range(1, budgets.infra_retries + 1):
        again = [i for i, t in enumerate(trajs) if t.terminal_reason == TerminalReason.INFRA_FAILURE]
        if not again:
            break
        redo = _play(engine, spec, [tasks[i] for i in again], [group_ids[i] for i in again],
                     seed=random.Random(f"{seed}:retry:{attempt}").randrange(2**31), **kw)
        for i, new in zip(again, redo):
            old = trajs[i]
            new.attempt = attempt
            new.retry_lineage = [*old.retry_lineage, f"{old.trajectory_id}: attempt {old.attempt}: {infra_reason(old)}"]
            trajs[i] = validate(new)
    return trajs


def _play(engine: Engine, spec: EnvSpec, tasks: list[Task], group_ids: list[str], *, budgets: LoopBudgets, sampling: dict,
          policy_version: int, seed: int, tokenizer_hashes, generator, entropy_out, concurrent_steps: bool,
          watchdog: Watchdog, on_turn: Callable[[], int] | None) -> list[Trajectory]:
    tok = engine.tokenizer
    threaded = concurrent_steps or budgets.step_timeout_s is not None
    envs = [spec.make() for _ in tasks]
    threads = [EnvThread(f"tracerl-env-{i}") if threaded else None for i in range(len(tasks))]
    if hasattr(generator, "for_rows"):  # rollout.seeding: group (rollout/group_seeds.py): keyed by group, not row
        seeds = generator.reset_seeds(seed, group_ids)
    else:
        seeds = [random.Random(f"{seed}:{i}").randrange(2**31) for i in range(len(tasks))]
    v_name, v_revision = declared_verifier(spec)
    resets = run_all([(th, _reset, (env, task, s)) for th, env, task, s in zip(threads, envs, tasks, seeds)], None)
    episodes: list[_Episode] = []
    for task, gid, env, th, reset_seed, (messages, state) in zip(tasks, group_ids, envs, threads, seeds, resets):
        native = getattr(env, "native_tools", None)  # native tool mode: the template lists the tools (tool_turns.py)
        ids, roles = render_native_prompt(tok, messages, native) if native else render_prompt(tok, messages)
        traj = Trajectory(trajectory_id=uuid.uuid4().hex[:16], group_id=gid, task_id=task.id,
                          env_name=spec.name, task_source=task.source, task_revision=task.source_revision,
                          split=task.split, env_revision=spec.revision, reset_seed=reset_seed,
                          initial_state_hash=state, sampling=dict(sampling),
                          wall_start=time.time(), verifier_name=v_name,
                          verifier_revision=v_revision, **(tokenizer_hashes or {}))
        _append_by_role(traj, ids, roles)
        traj.add_span("prompt", 0, len(ids))
        episodes.append(_Episode(task, env, traj, th))
        if entropy_out is not None:  # an episode whose first generate fails has none, but is listed
            entropy_out.setdefault(traj.trajectory_id, [])

    def new_session():
        return engine.open_session() if hasattr(engine, "open_session") else StatelessSession(engine)

    session = new_session()
    try:
        while True:
            if on_turn is not None:
                version = on_turn()
                if version != policy_version:  # new weights: no KV entry of the old ones is reused
                    policy_version, session = version, new_session()
            active = [(k, ep) for k, ep in enumerate(episodes) if not ep.done]
            room = [min(budgets.max_new_tokens, budgets.max_tokens - len(ep.traj)) for _, ep in active]
            for (_, ep), r in zip(active, room):
                if r <= 0:
                    _finish(ep, spec, TerminalReason.MAX_TOKENS, None)
            active = [a for a, r in zip(active, room) if r > 0]
            room = [r for r in room if r > 0]
            if not active:
                break
            with watchdog.phase(f"engine.generate of {len(active)} rows"):
                gen = generator.for_rows([ep.traj.group_id for _, ep in active]) if hasattr(generator, "for_rows") \
                    else generator
                samples = generate_rows(session, [k for k, _ in active], [ep.traj.token_ids for _, ep in active],
                                        max_new_tokens=room, stop_strings=spec.stop_strings,
                                        stop_token_ids=[tok.eos_token_id], generator=gen, **sampling)
            stepping = []
            for (_, ep), sample in zip(active, samples):
                if isinstance(sample, Exception):  # this row's generate failed: its episode only
                    _finish(ep, spec, TerminalReason.INFRA_FAILURE, None)
                    ep.traj.verifier_output = {"fault": "engine_error", "error": f"{type(sample).__name__}: {sample}"[:200]}
                    continue
                if entropy_out is not None:
                    entropy_out.setdefault(ep.traj.trajectory_id, []).extend(sample.entropies)
                text = _take_action(ep, sample, spec, tok, budgets, policy_version)
                if text is not None:
                    stepping.append((ep, sample, text))
            futures: list = []

            def stuck(stepping=stepping, futures=futures) -> str:
                names = [f"episode {ep.traj.trajectory_id} (task {ep.task.id})" for (ep, _, _), f in
                         zip(stepping, futures or [None] * len(stepping)) if f is None or not f.done()]
                return f"env.step ({spec.name}) of " + (", ".join(names[:5]) + (" ..." if len(names) > 5 else ""))

            with watchdog.phase(stuck):
                steps = run_all([(ep.thread, _step, (ep.env, text)) for ep, _, text in stepping], budgets.step_timeout_s,
                                futures_out=futures)
            for (ep, sample, text), result in zip(stepping, steps):
                if result is None:
                    _finish(ep, spec, TerminalReason.INFRA_FAILURE, None)
                    ep.traj.verifier_output = {"infra": f"env step exceeded {budgets.step_timeout_s} s"}
                else:
                    _take_step(ep, sample, text, *result, spec, tok, budgets)
    finally:
        for th in threads:
            if th is not None:
                th.close()
    return [validate(ep.traj) for ep in episodes]


def _reset(env, task: Task, seed: int):
    return env.reset(task, seed), env.state_hash()


def _step(env, text: str):
    return env.step(text), env.state_hash()


def _append_by_role(traj: Trajectory, ids: list[int], roles: list[TokenRole]) -> None:
    start = 0
    for j in range(1, len(ids) + 1):
        if j == len(ids) or roles[j] != roles[start]:
            traj.append(ids[start:j], roles[start])
            start = j


def _take_action(ep: _Episode, sample, spec: EnvSpec, tok, budgets: LoopBudgets, policy_version: int):
    """Append the sampled action; the decoded text for the env, or None when the episode ended."""
    traj = ep.traj
    s, e = traj.append(sample.token_ids, TokenRole.ACTION, logprobs=sample.logprobs, policy_version=policy_version)
    traj.add_span("action", s, e, sampled_ids_sha256=ids_sha256(sample.token_ids))
    ep.turns += 1
    if sample.finish == "length" and len(traj) >= budgets.max_tokens:
        _finish(ep, spec, TerminalReason.MAX_TOKENS, None)
        return None
    return tok.decode(sample.token_ids, skip_special_tokens=True)


def _take_step(ep: _Episode, sample, text: str, step, state_hash: str, spec: EnvSpec, tok,
               budgets: LoopBudgets) -> None:
    traj = ep.traj
    info = step.info or {}
    if step.terminated:
        _finish(ep, spec, step.terminal_reason or TerminalReason.EOS, step.reward_components)
        traj.verifier_output = {k: v for k, v in info.items() if isinstance(v, (str, int, float, bool))}
        if info.get("verifier"):  # the verifier that ran (the declared one when nothing overrode it)
            traj.verifier_name, traj.verifier_revision = str(info["verifier"]), str(info.get("verifier_revision", ""))
        return
    native = getattr(ep.env, "native_tools", None)  # native tool mode: a call turn may end with EOS (Llama 3)
    user_turn = info.get("observation_role") == "user"  # the env answers as the user (a verifiers multi-turn env)
    if (sample.finish == "stop" and sample.token_ids and sample.token_ids[-1] == tok.eos_token_id
            and not ((native or user_turn) and step.observation is not None)):
        _finish(ep, spec, TerminalReason.EOS, None)  # the policy stopped without a final answer
        return
    if step.observation is not None:
        if user_turn:  # the next user message in the template's user role, after the sampled turn
            obs_ids, obs_roles = render_user_turn(tok, step.observation, sample.token_ids[-1] if sample.token_ids else None)
        elif native:  # the result in the template's tool role after the sampled call, which stays as sampled
            obs_ids, obs_roles = render_tool_turn(tok, step.observation, native,
                                                  sample.token_ids[-1] if sample.token_ids else None)
        else:
            obs_ids, obs_roles = render_observation(tok, step.observation)  # the tool role when the template has one
        if len(traj) + len(obs_ids) >= budgets.max_tokens:  # no room for the answer to it
            _finish(ep, spec, TerminalReason.MAX_TOKENS, None)
            return
        base = len(traj)
        _append_by_role(traj, obs_ids, obs_roles)
        s, e = (base + i for i in observation_bounds(obs_roles))  # the span covers the observation proper
        traj.add_span("observation", s, e, tool_name=info.get("tool"), tool_request=text,
                      tool_status=info.get("tool_status", "invalid_action" if info.get("invalid_action") else None),
                      tool_latency_s=info.get("tool_latency_s"),
                      tool_response_sha256=hashlib.sha256(step.observation.encode()).hexdigest(),
                      state_hash=state_hash)
    if ep.turns >= budgets.max_turns:
        _finish(ep, spec, TerminalReason.MAX_TURNS, None)
    elif len(traj) >= budgets.max_tokens:
        _finish(ep, spec, TerminalReason.MAX_TOKENS, None)
