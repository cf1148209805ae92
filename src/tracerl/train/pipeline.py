"""Run a recipe end to end: build or load the model, then its stages in order (docs/architecture.md, "The loop").

`run_recipe` creates the run directory, writes the resolved config and the manifest, and runs
`sft`, `eval` and `rl` stages as listed. Every held-out evaluation uses the same frozen
protocol, and the before/after table compares them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import yaml

from tracerl.config import Recipe
from tracerl.envs import get_env
from tracerl.envs._verify import declared_verifier
from tracerl.errors import UserError
from tracerl.eval.heldout import run_heldout
from tracerl.eval.record import heldout_protocol, record_evaluation
from tracerl.eval.slices import report_slices
from tracerl.manifest import build_manifest, sha256_text
from tracerl.models import build_tiny, load_model_and_tokenizer, tokenizer_hashes
from tracerl.rollout import LoopBudgets, TorchEngine
from tracerl.rollout.engine_api import sync_weights
from tracerl.rollout.engines import build_engine, engine_problem
from tracerl.store import RunDir
from tracerl.tasks import build_pool
from tracerl.tasks.attempts import engine_attempt_fn
from tracerl.tasks.task import tasks_sha256
from tracerl.telemetry import MetricLoggers
from tracerl.faults import wrap_engine, wrap_spec
from tracerl.sandbox.runtime import configure as configure_sandbox
from tracerl.models.device import model_device
from tracerl.train.checkpoint import load_reference, save_checkpoint
from tracerl.train.model_setup import attach_lora_if_due, check_model_setup, new_reference, place_policy
from tracerl.train.demos import collect_demos, demo_texts
from tracerl.train.grading import GraderRole
from tracerl.train.rl import RLState, train_rl
from tracerl.train import ray_backend
from tracerl.train.run_common import (RunResult, _print_table, _quiet_transformers, _resume_point,  # noqa: F401
                                      _sandbox_revision, _say)
from tracerl.train.sft_stage import load_sft_data, run_sft_stage
from tracerl.train.stages import RLStage, build_stage_tasks, recipe_tasks, rl_stages, write_ledger


def expert_kwargs(recipe: Recipe) -> dict:
    """Keyword arguments for the env's scripted expert (collect_demos passes only those it accepts)."""
    kw = {"tool_rate": recipe.sft.expert_tool_rate}
    if recipe.sft.expert_error_rate is not None:
        kw["error_rate"] = recipe.sft.expert_error_rate
    return kw


def run_recipe(recipe: Recipe, *, resume: str | Path | None = None) -> RunResult:
    """Run every stage of `recipe`; with `resume`, continue that run from its latest RL checkpoint."""
    if recipe.envs:  # several environments: train/multi_pipeline.py
        from tracerl.train.multi_pipeline import run_multi_recipe

        return run_multi_recipe(recipe, resume=resume)
    if recipe.run.backend == "ray" and not ray_backend.active():  # rollouts in Ray actors: train/ray_backend.py
        return ray_backend.run_on_ray(run_recipe, recipe, resume=resume)
    t_start = time.time()
    torch.set_num_threads(recipe.run.threads)
    torch.manual_seed(recipe.run.seed)
    _quiet_transformers()
    rl_state, stages, file_demos = None, list(recipe.stages), None
    configure_sandbox(recipe.sandbox)  # a runtime that cannot import its modules fails before anything is written
    check_model_setup(recipe)  # devices, peft, LoRA targets (train/model_setup.py): before any write
    if engine_problem(recipe.engine):  # engine.name=vllm without vLLM or a GPU: one sentence, nothing written
        raise UserError(engine_problem(recipe.engine))
    grader = (GraderRole.build(recipe.roles.grader, default_device=recipe.model.device)
              if "rl" in stages else None)  # a bad judge fails before any write
    episodes = gateway_rollout(recipe)  # an external agent through the gateway (a bad agent fails here), else the agent loop
    if resume is not None:
        run = RunDir(resume)
        ckpt, saved, stages = _resume_point(run, recipe)
        model, tokenizer = load_model_and_tokenizer(ckpt, dtype=recipe.model.dtype)  # a LoRA one: base + adapter
        torch.set_rng_state(saved["torch_rng"])
        rl_state = RLState(**{k: saved[k] for k in RLState.__dataclass_fields__ if k in saved})
        _say(f"resuming {run.path} from {ckpt.name} (policy version {rl_state.policy_version})")
    else:
        file_demos = load_sft_data(recipe)  # a bad conversations file fails before anything is written
        if recipe.model.path is not None:  # a bad path fails before anything is written
            model, tokenizer = load_model_and_tokenizer(recipe.model.path, gguf_file=recipe.model.gguf_file,
                                                        dtype=recipe.model.dtype)
            attach_lora_if_due(model, tokenizer, recipe, stage="load")  # peft refusing the model fails here
        run = RunDir(recipe.run.dir, create=True) if recipe.run.dir else RunDir.new(recipe.run.root, recipe.run.name)
        _say(f"run directory: {run.path}")
    config_yaml = yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False)
    run.config_path.write_text(config_yaml)

    clean_spec = get_env(recipe.env.name)  # held-out evaluation: the env as it is (eval.slices add faults)
    spec = wrap_spec(clean_spec, recipe.faults)  # faults: injected into training at the rates the recipe sets
    seed = recipe.run.seed
    # the recipe's task pool before any profile-based filter: SFT demonstrations and the manifest use it;
    # each RL stage builds its own pool from it (stages.build_stage_tasks)
    base_cfg = recipe_tasks(recipe)
    base_pool = build_pool(base_cfg.model_copy(update={"filters": base_cfg.filters.model_copy(
        update={"all_pass": False, "all_fail": False})}))
    train_tasks = base_pool.train
    heldout = base_pool.heldout or spec.generate("heldout", recipe.env.heldout_tasks, seed,
                                                 tuple(recipe.env.heldout_difficulty))
    demos = []
    if resume is None and file_demos is not None:
        demos = file_demos
    elif resume is None and (("sft" in stages and recipe.sft.source == "expert") or recipe.model.path is None):
        t0 = time.time()
        demos = collect_demos(spec, train_tasks[: recipe.sft.demos], seed=seed, max_turns=recipe.env.max_turns,
                              expert_kwargs=expert_kwargs(recipe))
        _say(f"collected {len(demos)} expert demonstrations through {spec.name} in {time.time() - t0:.1f}s")
    if resume is None and recipe.model.path is None:
        tiny = recipe.model.tiny
        t0 = time.time()
        corpus = demo_texts(demos) + [str(t.prompt) for t in heldout]
        model_dir = build_tiny(run.path / "base_model", corpus, tags=spec.special_tokens, vocab_size=tiny.vocab_size,
                               hidden_size=tiny.hidden_size, num_layers=tiny.num_layers, num_heads=tiny.num_heads,
                               intermediate_size=tiny.intermediate_size, max_positions=tiny.max_positions, seed=seed)
        model, tokenizer = load_model_and_tokenizer(model_dir, dtype=recipe.model.dtype)
        n_params = sum(p.numel() for p in model.parameters())
        _say(f"built tiny model ({n_params / 1e6:.2f}M parameters, vocab {len(tokenizer)}) in {time.time() - t0:.1f}s")
    tokenizer.save_pretrained(run.path / "tokenizer")
    hashes = tokenizer_hashes(tokenizer)
    if resume is None:
        run.write_manifest(build_manifest(
            config_yaml=config_yaml, seeds={"run": seed}, tokenizer=hashes,
            tasks={"source": spec.name, "train_sha256": tasks_sha256(train_tasks),
                   "heldout_sha256": tasks_sha256(heldout), "train": len(train_tasks), "heldout": len(heldout),
                   "revisions": sorted({t.source_revision for t in train_tasks + heldout}),
                   "pool": base_pool.manifest(), "sampler": recipe.tasks.sampler.model_dump(mode="json"),
                   "rl_stages": [st.describe() for st in rl_stages(recipe)]},
            env={"name": spec.name, "revision": spec.revision},
            verifier={**dict(zip(("name", "revision"), declared_verifier(spec))),
                      **({"grader": {**grader.grader.manifest(), "mode": grader.cfg.mode, "path": grader.cfg.path}}
                         if grader else {})},
            sandbox=_sandbox_revision(), truncation_policy=recipe.rl.truncation,
            model={"path": recipe.model.path, "gguf_file": recipe.model.gguf_file, "tiny": recipe.model.path is None},
            backend=ray_backend.backend_manifest(recipe)))
    else:
        run.store.add_event("resume", f"resumed at RL step {rl_state.step}", stage="rl", step=rl_state.step,
                            payload={"config_sha256": sha256_text(config_yaml)})

    place_policy(model, recipe)  # model.device, autocast, gradient checkpointing
    rl_episodes = ray_backend.backend_episodes(recipe, episodes, model=model, tokenizer=tokenizer, hashes=hashes,
                                               store=run.store)  # run.backend: ray plays them in a Ray actor
    clean_engine = build_engine(recipe.engine, model, tokenizer, seed=seed, max_model_len=recipe.env.max_tokens,
                                device=model_device(model))
    engine = wrap_engine(clean_engine, recipe.faults)  # faults.engine_error: failing rows in training rollouts
    budgets = LoopBudgets.from_env(recipe.env)
    if hasattr(episodes, "span_log"):
        episodes.span_log = run.path / "gateway_spans.jsonl"
    eval_tasks = heldout[: recipe.eval.tasks]
    eval_sampling = {"temperature": recipe.eval.temperature, "top_p": recipe.eval.top_p, "top_k": 0}
    summary_path = run.path / "summary.json"
    evals: list[dict] = json.loads(summary_path.read_text())["evals"] if summary_path.exists() else []
    version = rl_state.policy_version if rl_state else 0
    rl_steps_done = rl_state.step if rl_state else 0
    last_stage = "rl" if rl_state else "base"

    def evaluate(step: int, policy_version: int, label: str) -> dict[str, float]:
        frozen = dict(samples=recipe.eval.samples, ks=recipe.eval.k, budgets=budgets, sampling=eval_sampling,
                      policy_version=policy_version, seed=seed + 7919, tokenizer_hashes=hashes, episodes=episodes)
        res = run_heldout(clean_engine, clean_spec, eval_tasks, **frozen)
        protocol = heldout_protocol(model=model, tokenizer_hashes=hashes, spec=spec, tasks=eval_tasks,
                                    sampling=eval_sampling, budgets=budgets, n=recipe.eval.samples,
                                    ks=recipe.eval.k, seed=seed + 7919)
        # numbers are filed under the protocol's hash, so different protocols never share a column
        record_evaluation(run.path, protocol, res.trajectories, run=run, step=step,
                          extra={"policy_version": float(policy_version)})
        m = res.metrics()
        if recipe.eval.slices:  # beside the clean numbers, under the same protocol (eval/slices.py)
            m.update(report_slices(run, step, recipe, run_heldout, clean_engine, clean_spec, eval_tasks,
                                   res.trajectories, frozen, say=_say))
        evals.append({"after": label, "step": step, "protocol": protocol.column, **m})
        summary_path.write_text(json.dumps({"evals": evals}, indent=2))
        return m

    reference = {"model": load_reference(ckpt, model) if resume is not None else None}

    def on_ckpt(step: int, state: RLState) -> None:
        save_checkpoint(run.checkpoints / f"step_{step}", model, tokenizer, state={"stage": "rl", **state.as_dict()},
                        reference=reference["model"], marks=run.marks())

    loggers = MetricLoggers(run, recipe.loggers, hparams=recipe.model_dump(mode="json"))
    log_rl = lambda m, s: loggers.log(m, stage="rl", step=s)  # noqa: E731
    for stage in stages:
        attach_lora_if_due(model, tokenizer, recipe, stage=stage, run_path=run.path)  # the tiny model: after its SFT
        sync_weights(clean_engine, model, version)  # an engine with its own weights sees what SFT changed
        if stage in ("sft", "rft"):  # an rft stage is a rejection-sampled SFT pass (train/sft_stage.py)
            run_sft_stage("rejection" if stage == "rft" else recipe.sft.source, stage=stage, recipe=recipe, model=model,
                          tokenizer=tokenizer, engine=engine, spec=spec, demos=demos, train_tasks=train_tasks, run=run,
                          hashes=hashes, policy_version=version, step=rl_steps_done, loggers=loggers, say=_say)
            version += 1
            last_stage = stage
        elif stage == "eval":
            m = evaluate(rl_steps_done, version, last_stage)
            _say(f"eval after {last_stage}: held-out success {m['eval/success']:.3f} "
                 f"(avg@{recipe.eval.samples} over {len(eval_tasks)} tasks), tool calls/episode "
                 f"{m['eval/tool_calls_per_episode']:.2f}")
        elif stage == "rl":
            state = rl_state or RLState(policy_version=version)
            for st in rl_stages(recipe):
                if state.step >= st.end:
                    continue
                if recipe.rl.max_generated_tokens is not None and state.generated_tokens >= recipe.rl.max_generated_tokens:
                    break
                sampler = _start_stage(st, state, run=run, engine=engine, spec=spec, recipe=recipe, hashes=hashes,
                                       reference=reference, model=model, loaded=(base_cfg.sources, base_pool.sources))
                state = train_rl(model, tokenizer, engine, sampler, st.recipe, spec=spec, log=log_rl,
                                 on_eval=lambda s, v: evaluate(s, v, f"rl step {s}"), on_checkpoint=on_ckpt,
                                 store=run.store, tokenizer_hashes=hashes, progress=recipe.run.progress,
                                 state=state, until=st.end, stage_index=st.index, reference=reference["model"],
                                 grader=grader, episodes=rl_episodes)
            version, rl_steps_done, last_stage = state.policy_version, state.step, "rl"
    final = run.checkpoints / f"step_{rl_steps_done}"
    if not final.exists():
        save_checkpoint(final, model, tokenizer, state={"stage": last_stage, "step": rl_steps_done,
                                                        "policy_version": version})
    result = RunResult(run.path, [e for e in evals if not e["after"].startswith("rl step")], time.time() - t_start)
    summary_path.write_text(json.dumps({"evals": evals, "wall_s": result.wall_s}, indent=2))
    _print_table(result, recipe)
    if hasattr(episodes, "close"):
        episodes.close()
        (run.path / "gateway.json").write_text(json.dumps(episodes.totals, indent=2))
        _say(f"gateway: {episodes.totals}")
    loggers.close()
    run.close()
    return result


def gateway_rollout(recipe: Recipe):
    """`run_episodes`, or the gateway rollout of `recipe.gateway.agent`."""
    if recipe.gateway.agent is None:
        from tracerl.rollout import run_episodes

        return run_episodes
    from tracerl.serve.rollout import GatewayRollout

    return GatewayRollout(recipe.gateway)


def _start_stage(st: RLStage, state: RLState, *, run: RunDir, engine: TorchEngine, spec, recipe: Recipe,
                 hashes: dict[str, str], reference: dict, model, loaded):
    """Build the stage's pool and sampler; at a fresh start apply its resets and record the boundary."""
    resumed = state.rl_stage == st.name and state.step > st.start and state.sampler_state is not None
    if not resumed and st.index > 0 and st.reset_optimizer:
        state.roles_state = None
    if "reference" in st.recipe.rl.algorithm.roles():
        if not resumed and (reference["model"] is None or st.reset_reference):
            reference["model"] = new_reference(model, recipe)  # the policy at the stage start (LoRA: adapter off)
        elif reference["model"] is None:
            raise UserError(f"the checkpoint of {run.path} holds no KL reference policy, so rl.algorithm.kl.coef > 0 "
                            "cannot resume it; resume with rl.algorithm.kl.coef=0 or start the run again")
    r = st.recipe

    def attempt_fn():
        def spend(trajs):
            state.generated_tokens += sum(t.num_action_tokens for t in trajs)
            run.store.add_trajectories(trajs, stage="profile", step=state.step)

        return engine_attempt_fn(engine, spec, budgets=LoopBudgets.from_env(r.env),
                                 sampling=r.sampling.model_dump(), seed=r.run.seed * 7919 + st.index,
                                 policy_version=state.policy_version, tokenizer_hashes=hashes, on_trajectories=spend)

    t0 = time.time()
    tasks = build_stage_tasks(recipe, st, run_path=run.path, attempt_fn=attempt_fn,
                              policy=f"{run.path.name} policy version {state.policy_version}", loaded=loaded)
    if resumed:
        tasks.sampler.load_state_dict(state.sampler_state)
        return tasks.sampler
    state.rl_stage, state.sampler_state = st.name, None
    write_ledger(run.path / "tasks_ledger.jsonl", tasks.pool.ledger, st.name)
    payload = {**st.describe(), "pool": tasks.pool.manifest(), "train_tasks": len(tasks.pool.train),
               "profiled_tasks": len(tasks.profile) if tasks.profiled_here else 0,
               "generated_tokens_before": state.generated_tokens}
    run.store.add_event("rl_stage", f"RL stage {st.name!r} starts at step {st.start}", stage="rl", step=st.start,
                        payload=payload)
    _say(f"rl stage {st.name!r}: steps {st.start}..{st.end}, {len(tasks.pool.train)} training tasks, "
         f"sampler {r.tasks.sampler.kind}" + (f", profiled {len(tasks.profile)} tasks in {time.time() - t0:.0f}s"
                                                if tasks.profiled_here else ""))
    return tasks.sampler
