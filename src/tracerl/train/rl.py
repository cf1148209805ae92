"""The synchronous RL stage: draw tasks → rollouts → selection → Batch → Algorithm update.

The trainer is algorithm-blind: `rl.algorithm` (an `Algorithm` spec, validated when the recipe
loads) declares the roles, tensors, selection, reward shaping, advantage and loss terms, and the
loop below only calls them. Tasks come from the stage's sampler (`tracerl.tasks`: uniform, mixture,
curriculum), through DAPO dynamic sampling when the sampler or the algorithm asks for it; every
generated trajectory is validated and stored, the ones selection left out under stage
`rl_filtered`. Loss weights (infra failures, the truncation policy) are applied once, in `collate`.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable

import torch
from tqdm import tqdm

from tracerl.algorithms.batch import collate
from tracerl.algorithms.spec import StepContext
from tracerl.config import Recipe
from tracerl.contract import Trajectory
from tracerl.rollout import TorchEngine, run_episodes
from tracerl.rollout.engine_api import sync_weights
from tracerl.store.credit import per_trajectory, record_credit
from tracerl.tasks import Sampler, next_groups
from tracerl.telemetry import GateTripped, step_metrics
from tracerl.train.learner import build_learner


@dataclasses.dataclass
class RLState:
    """Everything a resumed RL stage needs to draw the same next batch and take the same step."""

    step: int = 0
    policy_version: int = 0
    rl_stage: str = "rl"  # the RL stage the sampler state belongs to
    sampler_state: dict | None = None  # the task sampler's state_dict
    generated_tokens: int = 0  # policy (ACTION) tokens generated so far, profiling included
    generator_state: torch.Tensor | None = None  # rollout sampling RNG
    gate_state: dict | None = None
    roles_state: dict | None = None  # optimizer and schedule of each trained role
    algorithm_state: dict | None = None  # entropy controller, the algorithm's random stream
    async_state: dict | None = None  # rl.mode async: buffered results and in-flight jobs (train/async_loop.py)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _task_metrics(report, sampler, generated_tokens: int, stage_index: int) -> dict[str, float]:
    """What the sampler and dynamic sampling did this step (`tasks/*`)."""
    return {"tasks/rounds": float(report.rounds), "tasks/groups_generated": float(report.groups_generated),
            "tasks/groups_kept": float(report.kept_groups), "tasks/oversampling": report.oversampling,
            "tasks/zero_variance_groups": float(sum(report.zero_variance_groups.values())),
            "tasks/generated_tokens": float(generated_tokens), "rl/stage": float(stage_index), **sampler.metrics()}


def train_rl(model, tokenizer, engine: TorchEngine, sampler: Sampler, recipe: Recipe, *, spec, log,
             on_eval: Callable[[int, int], dict[str, float]] | None, on_checkpoint: Callable[[int, RLState], None],
             store, tokenizer_hashes: dict[str, str], progress: bool = True, state: RLState | None = None,
             until: int | None = None, stage_index: int = 0, reference=None, grader=None,
             episodes=run_episodes) -> RLState:
    """Run RL steps until global step `until` (default `rl.steps`) or the generated-token budget.

    `recipe` is the stage's recipe (`stages.rl_stages`); `sampler` draws its tasks and its state is
    saved in every checkpoint. `reference` is the frozen reference policy (used when the algorithm has a KL term);
    `grader` a `train.grading.GraderRole` (`roles.grader`) that grades each round of rollouts.
    `episodes` plays the rollouts (`run_episodes`, or an external agent through the gateway: serve/rollout.py).
    """
    if recipe.rl.mode == "async":  # rollout workers beside the learner: train/async_loop.py
        from tracerl.train.async_loop import train_rl_async

        return train_rl_async(model, tokenizer, engine, sampler, recipe, spec=spec, log=log, on_eval=on_eval,
                              on_checkpoint=on_checkpoint, store=store, tokenizer_hashes=tokenizer_hashes,
                              progress=progress, state=state or RLState(), until=until, stage_index=stage_index,
                              reference=reference)
    cfg, algo = recipe.rl, recipe.rl.algorithm
    state = state or RLState()
    until = cfg.steps if until is None else until
    gen = torch.Generator().manual_seed(recipe.run.seed * 1000)
    if state.generator_state is not None:
        gen.set_state(state.generator_state)
    sampling = recipe.sampling.model_dump()
    ln = build_learner(recipe, algo, model, tokenizer, spec=spec, state=state, reference=reference,
                       stage_index=stage_index)
    roles, astate, budgets, gates, audits, probe, classify = (ln.roles, ln.astate, ln.budgets, ln.gates, ln.audits,
                                                              ln.probe, ln.classify)
    G = cfg.group_size
    n_roll = algo.rollouts_per_task(G)
    sampler_cfg = recipe.tasks.sampler
    if algo.dynamic_sampling and sampler_cfg.kind != "dynamic":
        sampler_cfg = sampler_cfg.model_copy(update={"kind": "dynamic"})

    def budget_left() -> bool:
        return cfg.max_generated_tokens is None or state.generated_tokens < cfg.max_generated_tokens

    bar = tqdm(total=until, initial=state.step, desc="rl", disable=not progress, leave=False)
    while state.step < until and budget_left():
        t0 = time.time()
        rounds = itertools.count()
        generated: list[Trajectory] = []
        entropy: dict[str, list[float]] = {}
        selection: dict[str, float] = {}

        def rollout(tasks):
            if not tasks:
                return []
            r = next(rounds)
            batch = [t for t in tasks for _ in range(n_roll)]
            groups = [f"s{state.step}-p{i // n_roll}" + (f"-r{r}" if r else "") for i in range(len(batch))]
            play = spec.play if hasattr(spec, "play") else (  # EnvRouter (train/multienv.py): several environments
                lambda eng, *a, **kw: episodes(eng, spec, *a, budgets=budgets, **kw))
            trajs = play(engine, batch, groups, sampling=sampling, policy_version=state.policy_version,
                         seed=recipe.run.seed * 100003 + state.step + r * 7_000_003,
                         tokenizer_hashes=tokenizer_hashes, generator=gen, entropy_out=entropy)
            if grader is not None:  # before selection: dynamic sampling and advantages see the judged reward
                grader.apply(trajs, batch, tokenizer)
            generated.extend(trajs)
            state.generated_tokens += sum(t.num_action_tokens for t in trajs)
            out = []
            by_group: dict[str, list[Trajectory]] = {}  # a gateway episode may split into several trajectories
            for t in trajs:
                by_group.setdefault(t.group_id, []).append(t)
            for i in range(len(tasks)):
                group = by_group.get(groups[i * n_roll], [])
                kept, rep = algo.select_group(group, G, astate.generator)
                for k, v in rep.items():
                    selection[k] = selection.get(k, 0.0) + v
                out.append([group[j] for j in kept])
            return out

        # dynamic sampling stops drawing once the token budget is spent
        got = next_groups(sampler_cfg, lambda k: sampler.next_batch(k) if budget_left() else [], rollout,
                          cfg.prompts_per_step, rewards=lambda g: [t.reward for t in g])
        trajs = [t for _, g in got.groups for t in g]
        kept = {t.trajectory_id for t in trajs}
        t_roll = time.time() - t0
        store.add_trajectories(trajs, stage="rl", step=state.step)
        store.add_trajectories([t for t in generated if t.trajectory_id not in kept], stage="rl_filtered",
                               step=state.step)
        metrics: dict[str, float] = {}
        before = probe.before_rl(engine, model, trajs, recipe.sampling.temperature)  # the first step: weights as sampled
        t1 = time.time()
        if trajs:
            ent = [entropy[t.trajectory_id] for t in trajs]
            rollout_entropy = sum(map(sum, ent)) / max(1, sum(map(len, ent)))
            ctx = StepContext(max_tokens=recipe.env.max_tokens, entropy_coef=astate.entropy_coef(algo, rollout_entropy),
                              generator=astate.generator, step=state.step)
            batch = collate(trajs, pad_id=tokenizer.pad_token_id, truncation=cfg.truncation,
                            truncation_penalty=cfg.truncation_penalty)
            rewards, shaping = algo.shape_rewards(batch, trajs, ctx)
            if hasattr(spec, "normalize"):  # several environments (train/multienv.py): per-domain reward scale
                rewards, norm = spec.normalize(rewards, trajs)
                shaping |= norm | spec.share_loss(batch, trajs)  # mixture.loss_share: per-domain loss weights
            stats, adv = ln.update(algo, roles, batch, rewards, minibatches=cfg.minibatches, ctx=ctx,
                                   whole_groups=cfg.whole_groups)
            record_credit(store, state.step, batch.trajectory_ids, per_trajectory(adv, batch.action_BT),
                          batch.weight_B.tolist())  # advantage and loss weight per trajectory: export / inspect
            if "updates" in stats:  # no optimizer step when every row had zero advantage
                roles.policy.scheduler.step()
            stats |= {"entropy_coef": ctx.entropy_coef} if algo.entropy.active else {}
            if astate.controller is not None:  # MAGIC's c_k moves every step; α_k = c_k only below target
                stats["entropy/magic_c"] = astate.controller.coef
            # staleness is measured against the version that was current when the batch was sampled
            metrics = step_metrics(trajs, advantages=adv, token_entropy=ent, loss_stats=stats | shaping | selection,
                                   timings={"rollout": t_roll, "learner": time.time() - t1},
                                   policy_version=state.policy_version, classify=classify)
        metrics |= _task_metrics(got.report, sampler, state.generated_tokens, stage_index)
        metrics |= grader.metrics() if grader is not None else {}
        if hasattr(spec, "step_metrics"):  # several environments: domain/<env>/* telemetry
            metrics |= spec.step_metrics(trajs, generated)
        state.policy_version += 1
        state.step += 1
        synced = sync_weights(engine, model, state.policy_version)  # an engine with its own weights copies them
        metrics |= audits.metrics(state.step)
        metrics |= probe.merge(before, probe.metrics(state.step, engine, model, trajs, recipe.sampling.temperature,
                                                     synced=synced))
        state.sampler_state = sampler.state_dict()
        state.gate_state = gates.state_dict()
        state.generator_state = gen.get_state()
        state.roles_state, state.algorithm_state = roles.state_dict(), astate.state_dict()
        if on_eval and cfg.eval_every and state.step % cfg.eval_every == 0 and state.step < cfg.steps:
            metrics |= on_eval(state.step, state.policy_version)
        log(metrics, state.step)
        held = f" | held-out {metrics['eval/success']:.3f}" if "eval/success" in metrics else ""
        dyn = f" | groups {got.report.kept_groups}/{got.report.groups_generated}" if got.report.rounds > 1 else ""
        line = (f"rl step {state.step:>3}/{cfg.steps} | reward {metrics.get('reward/mean', 0):.3f}{held} | "
                f"tool calls {metrics.get('tool/calls_per_episode', 0):.2f}{dyn} | "
                f"tok/s {metrics.get('throughput/tokens_per_s', 0):.0f} | {time.time() - t0:.1f}s")
        tqdm.write(line) if progress else print(line, flush=True)
        bar.update()
        trip = gates.update(state.step, metrics)
        trip = trip or (spec.gate(state.step, metrics) if hasattr(spec, "gate") else None)  # per-domain regression
        if trip is not None:  # stop cleanly: state saved, the event recorded, then a non-zero exit
            on_checkpoint(state.step, state)
            store.add_event("gate", trip.reason, stage="rl", step=state.step, payload=trip.as_dict())
            bar.close()
            raise GateTripped(trip)
        if cfg.checkpoint_every and state.step % cfg.checkpoint_every == 0:
            on_checkpoint(state.step, state)
    bar.close()
    return state
