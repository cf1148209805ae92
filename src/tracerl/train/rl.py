"""The synchronous RL stage: draw tasks → rollouts → rewards → advantages → clipped loss → update.

The trainer is algorithm-blind: the advantage estimator and the loss come from the registry
(`tracerl.algorithms`), chosen by name in the recipe. Tasks come from the stage's sampler
(`tracerl.tasks`: uniform, mixture, curriculum), through DAPO dynamic sampling when the recipe asks
for it; every generated trajectory is validated and stored, the ones dynamic sampling left out under
stage `rl_filtered`. Infrastructure failures never carry reward into the loss, and the truncation
policy (`mask` | `penalize` | `keep`) is an explicit recipe setting.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import time
from collections.abc import Callable

import torch
from tqdm import tqdm

from tracerl.algorithms import registry
from tracerl.algorithms.losses import kl_loss, policy_loss
from tracerl.config import Recipe
from tracerl.contract import Trajectory
from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes
from tracerl.tasks import Sampler, next_groups
from tracerl.telemetry import GateMonitor, GateTripped, step_metrics
from tracerl.telemetry.exploration import tag_classifier, tokenizer_pieces
from tracerl.train.batch import action_mask, pad_batch, token_logprobs
from tracerl.train.optim import make_optimizer, warmup_constant


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
    optimizer_state: dict | None = None
    scheduler_state: dict | None = None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def advantage_fn(name: str, scale: str) -> Callable[[torch.Tensor, list[str]], torch.Tensor]:
    fn = registry.get(name)
    params = inspect.signature(fn).parameters
    kwargs = {"scale": scale} if "scale" in params else {}
    return lambda rewards_B, groups: fn(rewards_B, groups, **kwargs)


def loss_weights(trajs: list[Trajectory], truncation: str) -> list[float]:
    """1 for trajectories the loss sees, 0 for infra failures and (policy `mask`) truncations."""
    return [0.0 if (not t.trainable or (truncation == "mask" and t.truncated)) else 1.0 for t in trajs]


def rl_update(model, optimizer, trajs: list[Trajectory], adv_B: torch.Tensor, weights_B: list[float], *,
              recipe: Recipe, pad_id: int, reference=None) -> dict[str, float]:
    """PPO-style clipped update over `minibatches` slices of one batch of rollouts.

    With `reference` and `rl.kl_coef > 0`, a k3 penalty KL(π_θ‖π_ref) on the same tokens is added.
    """
    cfg = recipe.rl
    # Rows whose advantage is zero everywhere add nothing to the surrogate's numerator; they are
    # left out of the forward pass and the loss is rescaled so the objective (its denominator:
    # all eligible tokens for `token`, all responses for `sequence` / `fixed`) stays exactly the same.
    full_mask_tokens = sum(w * t.num_action_tokens for t, w in zip(trajs, weights_B))
    full_rows = sum(1 for w in weights_B if w > 0)
    use_kl = reference is not None and cfg.kl_coef > 0
    # with a KL term every eligible row contributes, advantage or not
    keep = [i for i in range(len(trajs)) if weights_B[i] > 0 and (use_kl or float(adv_B[i]) != 0.0)]
    if not keep:
        return {}
    trajs, adv_B = [trajs[i] for i in keep], adv_B[keep]
    weights_B = [weights_B[i] for i in keep]
    ids, attn = pad_batch([t.token_ids for t in trajs], pad_id)
    mask = action_mask([t.roles for t in trajs], ids.shape[1]) * torch.tensor(weights_B)[:, None]
    old = torch.zeros(ids.shape, dtype=torch.float32)
    for i, t in enumerate(trajs):
        lp = torch.tensor(t.behavior_logprobs, dtype=torch.float32)
        old[i, : len(t)] = torch.nan_to_num(lp, nan=0.0)
    B, mb = len(trajs), max(1, cfg.minibatches)
    order = torch.randperm(B)
    stats_acc: dict[str, float] = {}
    model.train()
    for k in range(mb):
        idx = order[k * B // mb:(k + 1) * B // mb]
        if mask[idx].sum() == 0:
            continue
        lp, _ = token_logprobs(model, ids[idx], attn[idx], temperature=recipe.sampling.temperature)
        loss, stats = policy_loss(lp, old[idx], adv_B[idx], mask[idx], clip_low=cfg.clip_low,
                                  clip_high=cfg.clip_high, aggregation=cfg.aggregation,
                                  max_len=recipe.env.max_tokens)
        if use_kl:
            with torch.no_grad():
                ref_lp, _ = token_logprobs(reference, ids[idx], attn[idx], temperature=recipe.sampling.temperature)
            kl, kl_stats = kl_loss(lp, ref_lp, mask[idx], estimator="k3", coef=cfg.kl_coef,
                                   aggregation=cfg.aggregation, max_len=recipe.env.max_tokens)
            loss, stats = loss + kl, {**stats, **kl_stats}
        if cfg.aggregation == "token":
            loss = loss * mask[idx].sum() / (full_mask_tokens / mb)
        else:
            loss = loss * len(idx) / (full_rows / mb)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        optimizer.step()
        stats = {k2: float(v) for k2, v in stats.items() if torch.as_tensor(v).numel() == 1}
        stats |= {"loss": float(loss.detach()), "grad_norm": float(gnorm), "updates": float(mb)}
        for key, v in stats.items():
            stats_acc[key] = stats_acc.get(key, 0.0) + v / mb
    model.eval()
    stats_acc["trained_rows"] = float(len(keep))
    return stats_acc


def _task_metrics(report, sampler, generated_tokens: int, stage_index: int) -> dict[str, float]:
    """What the sampler and dynamic sampling did this step (`tasks/*`)."""
    m = {"tasks/rounds": float(report.rounds), "tasks/groups_generated": float(report.groups_generated),
         "tasks/groups_kept": float(report.kept_groups), "tasks/oversampling": report.oversampling,
         "tasks/zero_variance_groups": float(sum(report.zero_variance_groups.values())),
         "tasks/generated_tokens": float(generated_tokens), "rl/stage": float(stage_index)}
    if hasattr(sampler, "mean_at"):  # curriculum: the target pass rate of the batch just drawn
        m["tasks/curriculum_mean"] = sampler.mean_at(max(sampler.step - 1, 0))
    if hasattr(sampler, "report"):  # mixture: observed share of each source next to its target
        for row in sampler.report():
            m[f"tasks/share/{row['source']}"] = row["observed"]
            m[f"tasks/target/{row['source']}"] = row["target"]
    return m


def train_rl(model, tokenizer, engine: TorchEngine, sampler: Sampler, recipe: Recipe, *, spec, log,
             on_eval: Callable[[int, int], dict[str, float]] | None, on_checkpoint: Callable[[int, RLState], None],
             store, tokenizer_hashes: dict[str, str], progress: bool = True, state: RLState | None = None,
             until: int | None = None, stage_index: int = 0, reference=None) -> RLState:
    """Run RL steps until global step `until` (default `rl.steps`) or the generated-token budget.

    `recipe` is the stage's recipe (`stages.rl_stages`); `sampler` draws its tasks and its state is
    saved in every checkpoint. `reference` is the frozen KL reference (used when `rl.kl_coef > 0`).
    """
    cfg = recipe.rl
    state = state or RLState()
    until = cfg.steps if until is None else until
    gen = torch.Generator().manual_seed(recipe.run.seed * 1000)
    if state.generator_state is not None:
        gen.set_state(state.generator_state)
    adv_fn = advantage_fn(cfg.advantage, cfg.advantage_scale)
    optimizer = make_optimizer(model, cfg.lr)
    sched = warmup_constant(optimizer, warmup=3)
    if state.optimizer_state is not None:
        optimizer.load_state_dict(state.optimizer_state)
        sched.load_state_dict(state.scheduler_state)
    budgets = LoopBudgets(recipe.env.max_turns, recipe.env.max_tokens, recipe.env.max_new_tokens)
    sampling = recipe.sampling.model_dump()
    gates = GateMonitor(recipe.gates)
    if state.gate_state:
        gates.load_state_dict(state.gate_state)
    classify = tag_classifier(tokenizer_pieces(tokenizer))
    G = cfg.group_size

    def budget_left() -> bool:
        return cfg.max_generated_tokens is None or state.generated_tokens < cfg.max_generated_tokens

    bar = tqdm(total=until, initial=state.step, desc="rl", disable=not progress, leave=False)
    while state.step < until and budget_left():
        t0 = time.time()
        rounds = itertools.count()
        generated: list[Trajectory] = []
        entropy: dict[str, list[float]] = {}

        def rollout(tasks):
            if not tasks:
                return []
            r = next(rounds)
            batch = [t for t in tasks for _ in range(G)]
            groups = [f"s{state.step}-p{i // G}" + (f"-r{r}" if r else "") for i in range(len(batch))]
            trajs = run_episodes(engine, spec, batch, groups, budgets=budgets, sampling=sampling,
                                 policy_version=state.policy_version,
                                 seed=recipe.run.seed * 100003 + state.step + r * 7_000_003,
                                 tokenizer_hashes=tokenizer_hashes, generator=gen, entropy_out=entropy)
            generated.extend(trajs)
            state.generated_tokens += sum(t.num_action_tokens for t in trajs)
            return [trajs[i * G:(i + 1) * G] for i in range(len(tasks))]

        # dynamic sampling stops drawing once the token budget is spent
        got = next_groups(recipe.tasks.sampler, lambda k: sampler.next_batch(k) if budget_left() else [], rollout,
                          cfg.prompts_per_step, rewards=lambda g: [t.reward for t in g])
        trajs = [t for _, g in got.groups for t in g]
        kept = {t.trajectory_id for t in trajs}
        t_roll = time.time() - t0
        store.add_trajectories(trajs, stage="rl", step=state.step)
        store.add_trajectories([t for t in generated if t.trajectory_id not in kept], stage="rl_filtered",
                               step=state.step)
        stats, metrics = {}, {}
        t1 = time.time()
        if trajs:
            groups = [t.group_id for t in trajs]
            weights = loss_weights(trajs, recipe.rl.truncation)
            rewards = torch.tensor([t.reward for t in trajs], dtype=torch.float32)
            adv = adv_fn(rewards, groups) * torch.tensor(weights)
            stats = rl_update(model, optimizer, trajs, adv, weights, recipe=recipe, pad_id=tokenizer.pad_token_id,
                              reference=reference)
            if stats:  # no optimizer step when every group had zero advantage
                sched.step()
            # staleness is measured against the version that was current when the batch was sampled
            metrics = step_metrics(trajs, advantages=adv, token_entropy=[entropy[t.trajectory_id] for t in trajs],
                                   loss_stats=stats, timings={"rollout": t_roll, "learner": time.time() - t1},
                                   policy_version=state.policy_version, classify=classify)
        metrics |= _task_metrics(got.report, sampler, state.generated_tokens, stage_index)
        state.policy_version += 1
        state.step += 1
        state.sampler_state = sampler.state_dict()
        state.gate_state = gates.state_dict()
        state.generator_state = gen.get_state()
        state.optimizer_state, state.scheduler_state = optimizer.state_dict(), sched.state_dict()
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
        if trip is not None:  # stop cleanly: state saved, the event recorded, then a non-zero exit
            on_checkpoint(state.step, state)
            store.add_event("gate", trip.reason, stage="rl", step=state.step, payload=trip.as_dict())
            bar.close()
            raise GateTripped(trip)
        if cfg.checkpoint_every and state.step % cfg.checkpoint_every == 0:
            on_checkpoint(state.step, state)
    bar.close()
    return state
