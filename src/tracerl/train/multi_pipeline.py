"""Run a recipe with `envs:` (several environments) end to end; `run_recipe` hands such recipes here.

The same stages as the single-environment pipeline (`train/pipeline.py`): build or load the model,
then `sft`, `eval` and `rl` in order. What differs:
- SFT demonstrations come from every environment's expert (`envs[i].demos`, else sft.demos × share);
  the per-environment counts and shares are printed, stored as an event and in the manifest.
- Held-out evaluation runs each environment's frozen protocol on its own held-out tasks and budgets;
  its numbers are `eval/<env>/*` (each recorded under its own protocol column), and `eval/*` is
  their unweighted mean (macro average over domains).
- Each RL stage trains on its environments (`rl.stages[i].envs`, a domain cascade) through an
  `EnvRouter` and an `EnvMixtureSampler` (train/multienv.py); stage resets work as for one env.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import torch
import yaml

from tracerl.envs._verify import declared_verifier
from tracerl.errors import UserError
from tracerl.eval.heldout import run_heldout
from tracerl.eval.record import heldout_protocol, record_evaluation
from tracerl.faults import wrap_spec
from tracerl.manifest import build_manifest, sha256_text
from tracerl.models import build_tiny, load_model_and_tokenizer, tokenizer_hashes
from tracerl.rollout import TorchEngine
from tracerl.store import RunDir
from tracerl.tasks import build_pool
from tracerl.tasks.attempts import engine_attempt_fn
from tracerl.tasks.task import tasks_sha256
from tracerl.telemetry import MetricLoggers
from tracerl.models.device import model_device
from tracerl.train.checkpoint import load_reference, save_checkpoint
from tracerl.train.model_setup import check_model_setup, new_reference, place_policy
from tracerl.train.demos import collect_demos, demo_texts, tokenize_demo
from tracerl.train.multienv import EnvMixtureSampler, EnvRouter, resolve_routes, stage_envs
from tracerl.train.run_common import (RunResult, _print_table, _quiet_transformers, _resume_point, _sandbox_revision,
                                      _say)
from tracerl.train.rl import RLState, train_rl
from tracerl.train.sft import train_sft
from tracerl.train.stages import build_stage_tasks, rl_stages, write_ledger

_MACRO = ("success", "tool_calls_per_episode", "truncation_rate", "infra_failure_rate")


def _unfiltered(cfg):
    return cfg.model_copy(update={"filters": cfg.filters.model_copy(update={"all_pass": False, "all_fail": False})})


def _stage_routes(recipe, st):
    """The stage's routes: each env's budgets, with the stage's own budget fields (when set) over them."""
    routes = resolve_routes(st.recipe, wrap=lambda s: wrap_spec(s, recipe.faults))
    cfg = recipe.rl.stages[st.index] if recipe.rl.stages else None
    over = {k: getattr(cfg, k) for k in ("max_turns", "max_tokens", "max_new_tokens")
            if cfg is not None and getattr(cfg, k) is not None}
    return [dataclasses.replace(r, env=r.env.model_copy(update=over)) if over else r for r in routes]


def run_multi_recipe(recipe, *, resume: str | Path | None = None) -> RunResult:
    t_start = time.time()
    torch.set_num_threads(recipe.run.threads)
    torch.manual_seed(recipe.run.seed)
    _quiet_transformers()
    rl_state, stages = None, list(recipe.stages)
    check_model_setup(recipe)  # devices resolve here (model.lora is refused with envs: at load)
    if resume is not None:
        run = RunDir(resume)
        ckpt, saved, stages = _resume_point(run, recipe)
        model, tokenizer = load_model_and_tokenizer(ckpt, dtype=recipe.model.dtype)
        torch.set_rng_state(saved["torch_rng"])
        rl_state = RLState(**{k: saved[k] for k in RLState.__dataclass_fields__ if k in saved})
        _say(f"resuming {run.path} from {ckpt.name} (policy version {rl_state.policy_version})")
    else:
        if recipe.model.path is not None:
            model, tokenizer = load_model_and_tokenizer(recipe.model.path, gguf_file=recipe.model.gguf_file,
                                                        dtype=recipe.model.dtype)
        run = RunDir(recipe.run.dir, create=True) if recipe.run.dir else RunDir.new(recipe.run.root, recipe.run.name)
        _say(f"run directory: {run.path}")
    config_yaml = yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False)
    run.config_path.write_text(config_yaml)
    seed = recipe.run.seed

    routes = resolve_routes(recipe, wrap=lambda s: wrap_spec(s, recipe.faults))
    pools = {r.name: build_pool(_unfiltered(r.tasks)) for r in routes}
    heldout = {r.name: pools[r.name].heldout or r.spec.generate("heldout", r.env.heldout_tasks, seed,
                                                                tuple(r.env.heldout_difficulty)) for r in routes}
    task_env: dict[str, str] = {}
    for r in routes:
        for t in pools[r.name].train + heldout[r.name]:
            if task_env.setdefault(t.id, r.name) != r.name:
                raise UserError(f"task id {t.id!r} is in the pools of both {task_env[t.id]!r} and {r.name!r}; "
                                "give each environment's tasks their own ids")
    demos, sft_counts = [], {}
    if resume is None and ("sft" in stages or recipe.model.path is None):
        t0 = time.time()
        for r in routes:
            kw = {"tool_rate": recipe.sft.expert_tool_rate}
            if r.expert_error_rate is not None:
                kw["error_rate"] = r.expert_error_rate
            got = collect_demos(r.spec, pools[r.name].train[: r.demos], seed=seed, max_turns=r.env.max_turns,
                                expert_kwargs=kw)
            sft_counts[r.name] = len(got)
            demos += got
        total = max(1, len(demos))
        _say(f"collected {len(demos)} expert demonstrations in {time.time() - t0:.1f}s: "
             + ", ".join(f"{n} {c} ({c / total:.0%})" for n, c in sft_counts.items()))
    if resume is None and recipe.model.path is None:
        tiny = recipe.model.tiny
        tags = list(dict.fromkeys(tag for r in routes for tag in r.spec.special_tokens))
        corpus = demo_texts(demos) + [str(t.prompt) for r in routes for t in heldout[r.name]]
        model_dir = build_tiny(run.path / "base_model", corpus, tags=tags, vocab_size=tiny.vocab_size,
                               hidden_size=tiny.hidden_size, num_layers=tiny.num_layers, num_heads=tiny.num_heads,
                               intermediate_size=tiny.intermediate_size, max_positions=tiny.max_positions, seed=seed)
        model, tokenizer = load_model_and_tokenizer(model_dir, dtype=recipe.model.dtype)
        _say(f"built tiny model ({sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, "
             f"vocab {len(tokenizer)})")
    tokenizer.save_pretrained(run.path / "tokenizer")
    hashes = tokenizer_hashes(tokenizer)
    envs_info = {r.name: {"share": r.share, "train": len(pools[r.name].train), "heldout": len(heldout[r.name]),
                          "train_sha256": tasks_sha256(pools[r.name].train), "heldout_sha256": tasks_sha256(heldout[r.name]),
                          "sft_demos": sft_counts.get(r.name, 0), "reward_weights": r.spec.reward_weights}
                 for r in routes}
    if resume is None:
        stage_list = [{**st.describe(), "envs": names} for st, names in zip(rl_stages(recipe), stage_envs(recipe))]
        run.write_manifest(build_manifest(
            config_yaml=config_yaml, seeds={"run": seed}, tokenizer=hashes,
            tasks={"source": "+".join(envs_info), "envs": envs_info, "rl_stages": stage_list},
            env={"name": "+".join(envs_info), "envs": {r.name: r.spec.revision for r in routes}},
            verifier={r.name: dict(zip(("name", "revision"), declared_verifier(r.spec))) for r in routes},
            sandbox=_sandbox_revision(), truncation_policy=recipe.rl.truncation,
            model={"path": recipe.model.path, "gguf_file": recipe.model.gguf_file, "tiny": recipe.model.path is None}))
        if sft_counts:
            run.store.add_event("sft_mixture", "SFT demonstrations per environment", stage="sft", step=0,
                                payload={n: {"demos": c, "share": c / max(1, len(demos))} for n, c in sft_counts.items()})
    else:
        run.store.add_event("resume", f"resumed at RL step {rl_state.step}", stage="rl", step=rl_state.step,
                            payload={"config_sha256": sha256_text(config_yaml)})

    place_policy(model, recipe)  # model.device, autocast, gradient checkpointing
    engine = TorchEngine(model, tokenizer, device=model_device(model))
    eval_sampling = {"temperature": recipe.eval.temperature, "top_p": recipe.eval.top_p, "top_k": 0}
    summary_path = run.path / "summary.json"
    evals: list[dict] = json.loads(summary_path.read_text())["evals"] if summary_path.exists() else []
    version = rl_state.policy_version if rl_state else 0
    rl_steps_done = rl_state.step if rl_state else 0
    last_stage = "rl" if rl_state else "base"

    def evaluate(step: int, policy_version: int, label: str) -> dict[str, float]:
        m, columns = {}, {}
        for r in routes:
            tasks = heldout[r.name][: r.eval_tasks]
            res = run_heldout(engine, r.spec, tasks, samples=recipe.eval.samples, ks=recipe.eval.k, budgets=r.budgets,
                              sampling=eval_sampling, policy_version=policy_version, seed=seed + 7919,
                              tokenizer_hashes=hashes)
            protocol = heldout_protocol(model=model, tokenizer_hashes=hashes, spec=r.spec, tasks=tasks,
                                        sampling=eval_sampling, budgets=r.budgets, n=recipe.eval.samples,
                                        ks=recipe.eval.k, seed=seed + 7919)
            record_evaluation(run.path, protocol, res.trajectories, run=run, step=step,
                              extra={"policy_version": float(policy_version)})
            m |= res.metrics(prefix=f"eval/{r.name}")
            columns[r.name] = protocol.column
        for key in [*_MACRO, *(f"pass@{k}" for k in recipe.eval.k)]:
            vals = [m[f"eval/{r.name}/{key}"] for r in routes if f"eval/{r.name}/{key}" in m]
            if vals:
                m[f"eval/{key}"] = sum(vals) / len(vals)
        evals.append({"after": label, "step": step, "protocol": columns, **m})
        summary_path.write_text(json.dumps({"evals": evals}, indent=2))
        return m

    reference = {"model": load_reference(ckpt, model) if resume is not None else None}

    def on_ckpt(step: int, state: RLState) -> None:
        save_checkpoint(run.checkpoints / f"step_{step}", model, tokenizer, state={"stage": "rl", **state.as_dict()},
                        reference=reference["model"], marks=run.marks())

    loggers = MetricLoggers(run, recipe.loggers, hparams=recipe.model_dump(mode="json"))
    for stage in stages:
        if stage == "sft":
            examples = [tokenize_demo(tokenizer, d) for d in demos]
            _say(f"sft: {len(examples)} demonstrations over {len(routes)} environments, {recipe.sft.epochs} epochs")
            summary = train_sft(model, tokenizer, examples, recipe.sft, seed=seed,
                                log=lambda m, s: loggers.log(m, stage="sft", step=s), progress=recipe.run.progress)
            _say(f"sft: final loss {summary['sft/final_loss']:.3f} in {summary['sft/wall_s']:.1f}s")
            version += 1
            last_stage = "sft"
        elif stage == "eval":
            m = evaluate(rl_steps_done, version, last_stage)
            _say(f"eval after {last_stage}: held-out success {m['eval/success']:.3f} (mean over environments): "
                 + ", ".join(f"{r.name} {m[f'eval/{r.name}/success']:.3f}" for r in routes))
        elif stage == "rl":
            state = rl_state or RLState(policy_version=version)
            for st, active in zip(rl_stages(recipe), stage_envs(recipe)):
                if state.step >= st.end:
                    continue
                if recipe.rl.max_generated_tokens is not None and state.generated_tokens >= recipe.rl.max_generated_tokens:
                    break
                st_routes = _stage_routes(recipe, st)
                sampler = _start_stage(st, active, st_routes, state, run=run, engine=engine, recipe=recipe,
                                       hashes=hashes, reference=reference, model=model, pools=pools)
                best = {}
                for e in evals:
                    for r in routes:
                        v = e.get(f"eval/{r.name}/success")
                        if v is not None:
                            best[r.name] = max(best.get(r.name, v), v)
                router = EnvRouter(st_routes, active, task_env, normalize=recipe.mixture.normalize_rewards,
                                   tolerance=recipe.mixture.regression_tolerance, best=best)
                longest = max(r.env.max_tokens for r in st_routes if r.name in active)
                st_recipe = st.recipe.model_copy(update={"env": st.recipe.env.model_copy(update={"max_tokens": longest})})
                state = train_rl(model, tokenizer, engine, sampler, st_recipe, spec=router,
                                 log=lambda m, s: loggers.log(m, stage="rl", step=s),
                                 on_eval=lambda s, v: evaluate(s, v, f"rl step {s}"), on_checkpoint=on_ckpt,
                                 store=run.store, tokenizer_hashes=hashes, progress=recipe.run.progress,
                                 state=state, until=st.end, stage_index=st.index, reference=reference["model"])
            version, rl_steps_done, last_stage = state.policy_version, state.step, "rl"
    final = run.checkpoints / f"step_{rl_steps_done}"
    if not final.exists():
        save_checkpoint(final, model, tokenizer, state={"stage": last_stage, "step": rl_steps_done,
                                                        "policy_version": version})
    result = RunResult(run.path, [e for e in evals if not e["after"].startswith("rl step")], time.time() - t_start)
    summary_path.write_text(json.dumps({"evals": evals, "wall_s": result.wall_s}, indent=2))
    _print_domains(result, [r.name for r in routes])
    _print_table(result, recipe)
    loggers.close()
    run.close()
    return result


def _start_stage(st, active, routes, state: RLState, *, run, engine, recipe, hashes, reference, model, pools):
    """Every active environment's pool and sampler under one mixture sampler; resets and the boundary event."""
    resumed = state.rl_stage == st.name and state.step > st.start and state.sampler_state is not None
    if not resumed and st.index > 0 and st.reset_optimizer:
        state.roles_state = None
    if "reference" in st.recipe.rl.algorithm.roles():
        if not resumed and (reference["model"] is None or st.reset_reference):
            reference["model"] = new_reference(model, recipe)
        elif reference["model"] is None:
            raise UserError(f"the checkpoint of {run.path} holds no KL reference policy, so rl.algorithm.kl.coef > 0 "
                            "cannot resume it; resume with rl.algorithm.kl.coef=0 or start the run again")
    children, ledgers = {}, {}
    for r in routes:
        if r.name not in active:
            continue

        def attempt_fn(r=r):
            def spend(trajs):
                state.generated_tokens += sum(t.num_action_tokens for t in trajs)
                run.store.add_trajectories(trajs, stage="profile", step=state.step)

            return engine_attempt_fn(engine, r.spec, budgets=r.budgets, sampling=st.recipe.sampling.model_dump(),
                                     seed=st.recipe.run.seed * 7919 + st.index, policy_version=state.policy_version,
                                     tokenizer_hashes=hashes, on_trajectories=spend)

        sub = dataclasses.replace(st, name=f"{st.name}.{r.name}", tasks=r.tasks)
        tasks = build_stage_tasks(recipe, sub, run_path=run.path, attempt_fn=attempt_fn,
                                  policy=f"{run.path.name} policy version {state.policy_version}",
                                  loaded=(r.tasks.sources, pools[r.name].sources))
        children[r.name], ledgers[r.name] = tasks.sampler, tasks.pool
    sampler = EnvMixtureSampler(children, {r.name: r.share for r in routes if r.name in active})
    if resumed:
        sampler.load_state_dict(state.sampler_state)
        return sampler
    state.rl_stage, state.sampler_state = st.name, None
    for name, pool in ledgers.items():
        write_ledger(run.path / "tasks_ledger.jsonl", pool.ledger, f"{st.name}.{name}")
    payload = {**st.describe(), "envs": {n: {"target_share": sampler.targets[n], "train_tasks": len(p.train)}
                                         for n, p in ledgers.items()}, "generated_tokens_before": state.generated_tokens}
    run.store.add_event("rl_stage", f"RL stage {st.name!r} starts at step {st.start} on {', '.join(active)}",
                        stage="rl", step=st.start, payload=payload)
    _say(f"rl stage {st.name!r}: steps {st.start}..{st.end} on " +
         ", ".join(f"{n} ({sampler.targets[n]:.0%}, {len(p.train)} tasks)" for n, p in ledgers.items()))
    return sampler


def _print_domains(result: RunResult, names: list[str]) -> None:
    if not result.evals:
        return
    head = f"{'after':<8} " + " ".join(f"{n:>13}" for n in names)
    _say("\nheld-out success per environment\n" + head + "\n" + "-" * len(head))
    for e in result.evals:
        _say(f"{e['after']:<8} " + " ".join(f"{e.get(f'eval/{n}/success', float('nan')):>13.3f}" for n in names))
