"""The `rl` stage of a run: its RL stages in order (run/stages.py), each over its environments.

At a stage's fresh start its resets apply (optimizer, KL reference), each of its environments'
pools and samplers is built (stages.build_stage_tasks, profiling under the current policy when the
stage needs pass rates) and the boundary is recorded (event `rl_stage`, the tasks ledger); a resumed
stage rebuilds the same pools and reloads its sampler state. A recipe's single `env:` is the one
route, trained through its own spec and sampler. With `envs:` a stage trains on its environments
(`rl.stages[i].envs`, a domain cascade): their samplers are drawn at the target shares
(`EnvMixtureSampler`) and rollouts are played by an `EnvRouter` (run/multienv.py), which also
normalises rewards per environment and gates on per-domain held-out regressions.
"""

from __future__ import annotations

import dataclasses
import time

from tracerl.errors import UserError
from tracerl.rollout.faults import wrap_spec
from tracerl.rollout.attempts import engine_attempt_fn
from tracerl.train.model_setup import new_reference
from tracerl.placement.record import write_placement
from tracerl.run.multienv import EnvMixtureSampler, EnvRouter, resolve_routes, stage_envs
from tracerl.run.rl_loop import RLState, train_rl
from tracerl.run.common import _say
from tracerl.run.envs import RunEnvs
from tracerl.run.stages import RLStage, build_stage_tasks, rl_stages, write_ledger


def stage_routes(recipe, st: RLStage):
    """The stage's routes: each env's budgets, with the stage's own budget fields (when set) over them."""
    routes = resolve_routes(st.recipe, wrap=lambda s: wrap_spec(s, recipe.faults))
    cfg = recipe.rl.stages[st.index] if recipe.rl.stages else None
    over = {k: getattr(cfg, k) for k in ("max_turns", "max_tokens", "max_new_tokens")
            if cfg is not None and getattr(cfg, k) is not None}
    return [dataclasses.replace(r, env=r.env.model_copy(update=over)) if over else r for r in routes]


def stage_steps(st: RLStage) -> str:
    """The stage's updates as the console, metrics and checkpoints number them (1..N, run/rl_loop.py): a stage
    over global steps [start, end) of updates done holds updates start+1..end."""
    return f"steps {st.start + 1}..{st.end}"


def run_rl_stages(recipe, envs: RunEnvs, state: RLState, *, run, model, tokenizer, engine, hashes: dict[str, str],
                  reference: dict, heldout, log, on_checkpoint, grader, episodes) -> RLState:
    """Train every RL stage not yet done (from `state`, fresh or resumed); returns the state after the last."""
    for st, active in zip(rl_stages(recipe), stage_envs(recipe)):
        if state.step >= st.end:
            continue
        if recipe.rl.max_generated_tokens is not None and state.generated_tokens >= recipe.rl.max_generated_tokens:
            break
        routes = [r for r in stage_routes(recipe, st) if r.name in active]
        sampler = start_stage(st, routes, state, envs=envs, run=run, engine=engine, recipe=recipe, hashes=hashes,
                              reference=reference, model=model)
        spec, st_recipe = routes[0].spec, st.recipe
        if envs.mixed:
            spec = EnvRouter(routes, active, envs.task_env, normalize=recipe.mixture.normalize_rewards,
                             tolerance=recipe.mixture.regression_tolerance, best=heldout.best_success(),
                             loss_share=recipe.mixture.loss_share)
            longest = max(r.env.max_tokens for r in routes)
            st_recipe = st.recipe.model_copy(update={"env": st.recipe.env.model_copy(update={"max_tokens": longest})})
        state = train_rl(model, tokenizer, engine, sampler, st_recipe, spec=spec, log=log,
                         on_eval=lambda s, v: heldout.evaluate(s, v, f"rl step {s}"), on_checkpoint=on_checkpoint,
                         store=run.store, tokenizer_hashes=hashes, progress=recipe.run.progress, state=state,
                         until=st.end, stage_index=st.index, reference=reference["model"], grader=grader,
                         episodes=episodes)
        write_placement(run, recipe)  # where the learner's ranks and the rollout actors ran (manifest `placement`)
    return state


def start_stage(st: RLStage, routes, state: RLState, *, envs: RunEnvs, run, engine, recipe, hashes: dict[str, str],
                reference: dict, model):
    """Build the stage's pools and sampler; at a fresh start apply its resets and record the boundary."""
    resumed = state.rl_stage == st.name and state.step > st.start and state.sampler_state is not None
    if not resumed and st.index > 0 and st.reset_optimizer:
        state.roles_state = None
    if "reference" in st.recipe.rl.algorithm.roles():
        if not resumed and (reference["model"] is None or st.reset_reference):
            reference["model"] = new_reference(model, recipe)  # the policy at the stage start (LoRA: adapter off)
        elif reference["model"] is None:
            raise UserError(f"the checkpoint of {run.path} holds no KL reference policy, so rl.algorithm.kl.coef > 0 "
                            "cannot resume it; resume with rl.algorithm.kl.coef=0 or start the run again")
    t0, built, loaded = time.time(), {}, {r.name: r.tasks.sources for r in envs.routes}
    for r in routes:
        def attempt_fn(r=r):
            def spend(trajs):
                state.generated_tokens += sum(t.num_action_tokens for t in trajs)
                run.store.add_trajectories(trajs, stage="profile", step=state.step)

            return engine_attempt_fn(engine, r.spec, budgets=r.budgets, sampling=st.recipe.sampling.model_dump(),
                                     seed=st.recipe.run.seed * 7919 + st.index, policy_version=state.policy_version,
                                     tokenizer_hashes=hashes, on_trajectories=spend)

        sub = dataclasses.replace(st, name=f"{st.name}.{r.name}" if envs.mixed else st.name, tasks=r.tasks)
        built[r.name] = build_stage_tasks(recipe, sub, run_path=run.path, attempt_fn=attempt_fn,
                                          policy=f"{run.path.name} policy version {state.policy_version}",
                                          loaded=(loaded[r.name], envs.pools[r.name].sources))
    sampler = (EnvMixtureSampler({n: b.sampler for n, b in built.items()}, {r.name: r.share for r in routes},
                                 schedule=recipe.mixture.schedule)
               if envs.mixed else built[routes[0].name].sampler)
    if resumed:
        sampler.load_state_dict(state.sampler_state)
        return sampler
    state.rl_stage, state.sampler_state = st.name, None
    for name, b in built.items():
        write_ledger(run.path / "tasks_ledger.jsonl", b.pool.ledger, f"{st.name}.{name}" if envs.mixed else st.name)
    info = {n: {"pool": b.pool.manifest(), "train_tasks": len(b.pool.train),
                "profiled_tasks": len(b.profile) if b.profiled_here else 0} for n, b in built.items()}
    if envs.mixed:
        payload = {**st.describe(), "envs": {n: {"target_share": sampler.targets[n], **i} for n, i in info.items()}}
        where = f" on {', '.join(built)}"
        said = " on " + ", ".join(f"{n} ({sampler.targets[n]:.0%}, {i['train_tasks']} tasks)" for n, i in info.items())
    else:
        (b,), (i,) = built.values(), info.values()
        payload, where = {**st.describe(), **i}, ""
        said = (f", {i['train_tasks']} training tasks, sampler {st.recipe.tasks.sampler.kind}"
                + (f", profiled {i['profiled_tasks']} tasks in {time.time() - t0:.0f}s" if b.profiled_here else ""))
    payload["generated_tokens_before"] = state.generated_tokens
    run.store.add_event("rl_stage", f"RL stage {st.name!r} starts at step {st.start}{where}", stage="rl", step=st.start,
                        payload=payload)
    _say(f"rl stage {st.name!r}: {stage_steps(st)}{said}")
    return sampler
