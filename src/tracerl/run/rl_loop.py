"""The RL loop of every mode: rollout source → one RL step (Batch → Algorithm update) → publish → log.

A rollout source (`rollout/sources.py`: sync, or async under a staleness bound, `rollout/async_source.py`)
yields each step's groups; `rl_step` collates them once, has the roles score the batch and runs the
learner's update (`train/update.py`: one minibatch loop, in-process or on the ranks of a sharded
learner); the loop publishes the new version, evaluates, gates, checkpoints and logs. Sync, async,
sharded, Ray, multi-environment and gateway runs differ only in their source and where roles live.

The trainer is algorithm-blind: `rl.algorithm` (an `Algorithm` spec, validated when the recipe
loads) declares the roles, tensors, selection, reward shaping, advantage and loss terms, and the
loop below only calls them. Tasks come from the stage's sampler (`tracerl.tasks`: uniform, mixture,
curriculum), through DAPO dynamic sampling when the sampler or the algorithm asks for it; every
generated trajectory is validated and stored, the ones selection left out under stage
`rl_filtered`. Loss weights (infra failures, the truncation policy) and the tool cost (`rl.tool_cost`) are applied
once, in `collate`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import torch
from tqdm import tqdm

from tracerl.algorithms.batch import collate, tool_calls_B
from tracerl.algorithms.spec import StepContext
from tracerl.config import Recipe
from tracerl.rollout import run_episodes
from tracerl.store.credit import per_trajectory, record_credit
from tracerl.tasks import Sampler
from tracerl.telemetry import GateTripped, step_metrics
from tracerl.telemetry.progress import bars_on
from tracerl.rollout.async_source import AsyncState, async_algorithm
from tracerl.train.learner import Learner, build_learner
from tracerl.train.roles import Roles
from tracerl.rollout.sources import StepRollouts, SyncSource


@dataclasses.dataclass
class RLState:
    """Everything a resumed RL stage needs to draw the same next batch and take the same step. `write_shards`
    (set by `train_rl` for a sharded learner: its ranks write their shards into a checkpoint being written,
    `learner.checkpoint_format: sharded`, train/shards.py) is a live handle, never saved."""

    step: int = 0
    policy_version: int = 0
    rl_stage: str = "rl"  # the RL stage the sampler state belongs to
    sampler_state: dict | None = None  # the task sampler's state_dict
    generated_tokens: int = 0  # policy (ACTION) tokens generated so far, profiling included
    generator_state: torch.Tensor | None = None  # rollout sampling RNG (sync)
    gate_state: dict | None = None
    roles_state: dict | None = None  # optimizer and schedule of each trained role
    algorithm_state: dict | None = None  # entropy controller, the algorithm's random stream
    async_state: AsyncState | None = None  # rl.mode async: buffered results and in-flight jobs (rollout/async_source.py)
    write_shards: Any = dataclasses.field(default=None, repr=False, compare=False)  # not saved (as_dict)

    def as_dict(self) -> dict:
        """Plain data for a checkpoint (train/state_file.py): tensors, dicts, lists and numbers; the async
        state through its own `to_dict` (never `dataclasses.asdict`, which turns its jobs into bare dicts)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "write_shards"}
        out["async_state"] = self.async_state.to_dict() if self.async_state is not None else None
        return out

    @classmethod
    def from_dict(cls, saved: dict) -> "RLState":
        """The state `as_dict` wrote (a checkpoint's trainer state: unknown keys, such as the RNG states, ignored)."""
        state = cls(**{f.name: saved[f.name] for f in dataclasses.fields(cls) if f.name in saved})
        if isinstance(state.async_state, dict):
            state.async_state = AsyncState.from_dict(state.async_state)
        return state


def _task_metrics(report, sampler, generated_tokens: int, stage_index: int) -> dict[str, float]:
    """What the sampler and dynamic sampling did this step (`tasks/*`)."""
    return {"tasks/rounds": float(report.rounds), "tasks/groups_generated": float(report.groups_generated),
            "tasks/groups_kept": float(report.kept_groups), "tasks/oversampling": report.oversampling,
            "tasks/zero_variance_groups": float(sum(report.zero_variance_groups.values())),
            "tasks/generated_tokens": float(generated_tokens), "rl/stage": float(stage_index), **sampler.metrics()}


class _CapturingRoles:
    """The roles, keeping the no-gradient scores the update computes (e.g. the proximal log-probs, for the
    importance-weight metrics of a decoupled update)."""

    def __init__(self, roles: Roles):
        self._roles, self.captured = roles, {}

    def __getattr__(self, name):
        return getattr(self._roles, name)

    def scores(self, batch, needs):
        out = self._roles.scores(batch, needs)
        self.captured |= out
        return out


def make_source(recipe: Recipe, algo, *, engine, sampler, spec, state: RLState, ln: Learner, grader, episodes,
                tokenizer, tokenizer_hashes, store, until: int, model, worker_factory=None):
    """The stage's rollout source: `rl.mode` sync or async (rollout/sources.py)."""
    common = dict(recipe=recipe, algo=algo, sampler=sampler, spec=spec, state=state, budgets=ln.budgets,
                  astate=ln.astate, grader=grader, tokenizer=tokenizer, tokenizer_hashes=tokenizer_hashes)
    if recipe.rl.mode == "async":
        from tracerl.rollout.async_source import AsyncSource

        return AsyncSource(**common, store=store, until=until, model=model, worker_factory=worker_factory, engine=engine)
    return SyncSource(**common, engine=engine, episodes=episodes)


def rl_step(got: StepRollouts, *, ln: Learner, algo, recipe: Recipe, spec, state: RLState, store, tokenizer,
            source) -> dict[str, float]:
    """The RL step on one step's rollouts: collate once → Batch → rewards → the learner's update → metrics."""
    cfg, roles, astate = recipe.rl, ln.roles, ln.astate
    trajs = got.trained
    t1 = time.time()
    ent = [got.entropy.get(t.trajectory_id, []) for t in trajs]
    rollout_entropy = sum(map(sum, ent)) / max(1, sum(map(len, ent)))
    ctx = StepContext(max_tokens=recipe.env.max_tokens, entropy_coef=astate.entropy_coef(algo, rollout_entropy),
                      generator=astate.generator, step=state.step,
                      max_tokens_B=spec.max_tokens_of(trajs) if hasattr(spec, "max_tokens_of") else None)
    batch = collate(trajs, pad_id=tokenizer.pad_token_id, truncation=cfg.truncation,
                    truncation_penalty=cfg.truncation_penalty, tool_cost=cfg.tool_cost)
    rewards, shaping = algo.shape_rewards(batch, trajs, ctx)
    if cfg.tool_cost:  # the mean price paid per episode, already in batch.reward_B (collate)
        shaping["reward/tool_cost"] = cfg.tool_cost * float(tool_calls_B(trajs).mean())
    if hasattr(spec, "normalize"):  # several environments (run/multienv.py): per-domain reward scale
        rewards, norm = spec.normalize(rewards, trajs)
        shaping |= norm | spec.share_loss(batch, trajs)  # mixture.loss_share: per-domain loss weights
    capture = _CapturingRoles(roles)
    stats, adv = ln.update(algo, capture, batch, rewards, minibatches=cfg.minibatches, ctx=ctx,
                           whole_groups=cfg.whole_groups)
    record_credit(store, state.step + 1, batch.trajectory_ids, per_trajectory(adv, batch.action_BT),
                  batch.weight_B.tolist())  # under the update's number, 1..N, as metrics and step_N checkpoints
    if "updates" in stats:  # no optimizer step when every row had zero advantage
        roles.policy.scheduler.step()
    stats |= {"entropy_coef": ctx.entropy_coef} if algo.entropy.active else {}
    if astate.controller is not None:  # MAGIC's c_k moves every step; α_k = c_k only below target
        stats["entropy/magic_c"] = astate.controller.coef
    # staleness is measured against the version that was current when the batch was sampled
    metrics = step_metrics(trajs, advantages=adv, token_entropy=ent, loss_stats=stats | shaping | got.selection,
                           timings={"rollout": got.rollout_s, "learner": time.time() - t1},
                           policy_version=state.policy_version, classify=ln.classify)
    return metrics | source.batch_metrics(batch, capture.captured)


def train_rl(model, tokenizer, engine, sampler: Sampler, recipe: Recipe, *, spec, log,
             on_eval: Callable[[int, int], dict[str, float]] | None, on_checkpoint: Callable[[int, RLState], None],
             store, tokenizer_hashes: dict[str, str], progress: bool = True, state: RLState | None = None,
             until: int | None = None, stage_index: int = 0, reference=None, grader=None,
             episodes=run_episodes, worker_factory=None) -> RLState:
    """Run RL steps until global step `until` (default `rl.steps`) or the generated-token budget.

    The one loop of every mode: the stage's rollout source (`make_source`: sync or async) hands each
    step's groups to `rl_step`, then the new version is published, and the step is evaluated, logged,
    gated and checkpointed. `recipe` is the stage's recipe (`stages.rl_stages`); `sampler` draws its
    tasks and its state is saved in every checkpoint. `reference` is the frozen reference policy (used
    when the algorithm has a KL term); `grader` a `train.grading.GraderRole` (`roles.grader`) that grades
    the rollouts before selection. `episodes` plays the sync rollouts (`run_episodes`, a Ray actor, or an
    external agent through the gateway: serve/rollout.py); `worker_factory` makes async rollout workers (tests).
    """
    cfg = recipe.rl
    state = state or RLState()
    until = cfg.steps if until is None else until
    progress = bars_on(progress)  # a bar on a terminal only; redirected output gets the plain step lines
    algo = async_algorithm(cfg.algorithm) if cfg.mode == "async" else cfg.algorithm
    ln = build_learner(recipe, algo, model, tokenizer, spec=spec, state=state, reference=reference,
                       stage_index=stage_index)
    state.write_shards = getattr(ln.roles.policy, "write_shards", None)  # a sharded learner's checkpoint shards
    source = make_source(recipe, algo, engine=engine, sampler=sampler, spec=spec, state=state, ln=ln, grader=grader,
                         episodes=episodes, tokenizer=tokenizer, tokenizer_hashes=tokenizer_hashes, store=store,
                         until=until, model=model, worker_factory=worker_factory)
    bar = tqdm(total=until, initial=state.step, desc="rl", disable=not progress, leave=False)
    try:
        source.start(model)
        while state.step < until and source.budget_left():
            t0 = time.time()
            got = source.next()
            if got is None:
                break  # nothing left to generate (the token budget is spent)
            metrics = _train_and_publish(got, ln=ln, algo=algo, recipe=recipe, spec=spec, state=state, store=store,
                                         tokenizer=tokenizer, source=source, engine=engine, model=model,
                                         sampler=sampler, grader=grader, stage_index=stage_index)
            if on_eval and cfg.eval_every and state.step % cfg.eval_every == 0 and state.step < cfg.steps:
                metrics |= on_eval(state.step, state.policy_version)
            log(metrics, state.step)
            _say_step(metrics, state.step, cfg.steps, got.line, time.time() - t0, progress)
            bar.update()
            trip = ln.gates.update(state.step, metrics)
            trip = trip or (spec.gate(state.step, metrics) if hasattr(spec, "gate") else None)  # per-domain regression
            if trip is not None:  # stop cleanly: state saved, the event recorded, then a non-zero exit
                on_checkpoint(state.step, state)
                store.add_event("gate", trip.reason, stage="rl", step=state.step, payload=trip.as_dict())
                raise GateTripped(trip)
            if cfg.checkpoint_every and state.step % cfg.checkpoint_every == 0:
                on_checkpoint(state.step, state)
        source.finish(store)
    finally:
        bar.close()
        source.close()
    return state


def _train_and_publish(got: StepRollouts, *, ln: Learner, algo, recipe: Recipe, spec, state: RLState, store, tokenizer,
                       source, engine, model, sampler, grader, stage_index: int) -> dict[str, float]:
    """Store the step's rollouts, take the RL step, publish the new version and record the state it leaves."""
    trajs = got.trained
    kept = {t.trajectory_id for t in trajs}
    update = state.step + 1  # the number this update is logged, gated and checkpointed (step_N) under: 1..N
    store.add_trajectories(trajs, stage="rl", step=update)
    store.add_trajectories([t for t in got.generated if t.trajectory_id not in kept], stage="rl_filtered",
                           step=update)
    temperature = recipe.sampling.temperature
    before = ln.probe.before_rl(engine, model, trajs, temperature)  # the first step: weights as sampled
    source.before_update()  # sync: an engine's own weight copy is freed until the publish below
    metrics = rl_step(got, ln=ln, algo=algo, recipe=recipe, spec=spec, state=state, store=store, tokenizer=tokenizer,
                      source=source) if trajs else {}
    metrics |= _task_metrics(got.report, sampler, state.generated_tokens, stage_index) | got.metrics
    metrics |= grader.metrics() if grader is not None else {}
    if hasattr(spec, "step_metrics"):  # several environments: domain/<env>/* telemetry
        metrics |= spec.step_metrics(trajs, got.generated)
    state.policy_version += 1
    state.step += 1
    synced = source.publish(model, state.policy_version)  # engines and workers that hold their own weights
    metrics |= ln.audits.metrics(state.step)
    metrics |= ln.probe.merge(before, ln.probe.metrics(state.step, engine, model, trajs, temperature, synced=synced))
    state.sampler_state = sampler.state_dict()
    state.gate_state = ln.gates.state_dict()
    source.save()
    state.roles_state, state.algorithm_state = ln.roles.state_dict(), ln.astate.state_dict()
    return metrics


def _say_step(metrics: dict[str, float], step: int, steps: int, extra: str, seconds: float, progress: bool) -> None:
    held = f" | held-out {metrics['eval/success']:.3f}" if "eval/success" in metrics else ""
    line = (f"rl step {step:>3}/{steps} | reward {metrics.get('reward/mean', 0):.3f}{held} | "
            f"tool calls {metrics.get('tool/calls_per_episode', 0):.2f}{extra} | "
            f"tok/s {metrics.get('throughput/tokens_per_s', 0):.0f} | {seconds:.1f}s")
    tqdm.write(line) if progress else print(line, flush=True)
