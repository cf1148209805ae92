"""Run a recipe end to end: build or load the model, then its stages in order (docs/architecture.md, "The loop").

`run_recipe` creates the run directory, writes the resolved config and the manifest, and runs
`sft`/`rft`, `eval` and `rl` stages as listed, over the run's environments (run/envs.py):
a recipe's `env:` is one route, `envs:` several. Each stage body is written once: SFT in
run/sft_stage.py, held-out evaluation in run/eval_stage.py (the same frozen protocol every
time, so the before/after table compares them), RL stages in run/rl_stage.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
import yaml

from tracerl.config import Recipe
from tracerl.errors import UserError
from tracerl.manifest import sha256_text
from tracerl.models import build_tiny, load_model_and_tokenizer, tokenizer_hashes
from tracerl.rollout.engine_api import sync_weights
from tracerl.rollout.engines import build_engine, engine_problem
from tracerl.store import RunDir
from tracerl.telemetry import MetricLoggers
from tracerl.rollout.faults import wrap_engine
from tracerl.sandbox.runtime import configure as configure_sandbox
from tracerl.models.allocator import configure_allocator
from tracerl.models.device import configure_torch, model_device, resolve_device
from tracerl.sandbox import cgroups as sandbox_cgroups
from tracerl.train.checkpoint import load_checkpoint_model, load_reference, restore_rng, save_checkpoint
from tracerl.train.model_setup import attach_lora_if_due, check_model_setup, place_policy
from tracerl.train.demos import demo_texts
from tracerl.run.eval_stage import HeldoutEval
from tracerl.train.grading import GraderRole
from tracerl.placement import record
from tracerl.run.rl_loop import RLState
from tracerl.run.rl_stage import run_rl_stages
from tracerl.rollout import ray_backend
from tracerl.run.common import RunResult, _print_table, _quiet_transformers, _resume_point, _say
from tracerl.run.envs import RunEnvs, expert_kwargs  # noqa: F401 (expert_kwargs: this module's API)
from tracerl.run.manifest import run_manifest
from tracerl.run.prompt_budget import check_prompt_budget
from tracerl.run.tool_setup import prepare_tokenizer
from tracerl.run.sft_stage import load_sft_data, run_sft_stage
from tracerl.envs.dataset import install as install_dataset_env


def run_recipe(recipe: Recipe, *, resume: str | Path | None = None) -> RunResult:
    """Run every stage of `recipe`; with `resume`, continue that run from its latest RL checkpoint."""
    if resume is None and recipe.run.dir:
        RunDir.refuse_existing(recipe.run.dir)  # an existing run is continued with --resume, never written over
    sandbox_cgroups.sweep_stale()  # the sandbox groups of trainers that were killed
    configure_allocator(recipe.run.allocator)  # run.allocator: before any worker or Ray runtime starts
    if ray_backend.needs_wrapper(recipe):  # rollouts in Ray actors or worker processes: rollout/ray_backend.py
        return ray_backend.run_on_ray(run_recipe, recipe, resume=resume)
    t_start = time.time()
    configure_torch(recipe.run.threads, deterministic=recipe.run.deterministic,  # run.deterministic
                    device=resolve_device(recipe.model.device))
    torch.manual_seed(recipe.run.seed)
    _quiet_transformers()
    stages = list(recipe.stages)
    reward_funcs = install_dataset_env(recipe)  # a reward: recipe's functions, checked before anything is written
    grader, episodes = _preflight(recipe, stages)
    run, ckpt, stages, model, tokenizer, rl_state, file_demos = _open_run(recipe, resume, stages)
    config_yaml = yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False)
    run.config_path.write_text(config_yaml)

    envs = RunEnvs.load(recipe)  # the routes, their unfiltered pools and held-out tasks (run/envs.py)
    seed = recipe.run.seed
    demos, sft_counts = [], {}
    if resume is None and file_demos is not None:
        demos = file_demos
    elif resume is None and recipe.reward is None and (("sft" in stages and recipe.sft.source == "expert")
                                                       or recipe.model.path is None):
        demos, sft_counts = envs.collect_demos(recipe, say=_say)
    if resume is None and recipe.model.path is None:
        model, tokenizer = _build_tiny_model(recipe, run, envs, demos)
    prepare_tokenizer(recipe, model, tokenizer, envs.routes)  # model.chat_template; native tools checked (exit 2)
    tokenizer.save_pretrained(run.path / "tokenizer")
    hashes = tokenizer_hashes(tokenizer)
    check_prompt_budget(envs, tokenizer)  # a prompt that fills env.max_tokens: one sentence, not a run of zeros
    if resume is None:
        run.write_manifest(run_manifest(recipe, envs, config_yaml=config_yaml, hashes=hashes, grader=grader,
                                        sft_counts=sft_counts))
        if reward_funcs is not None:  # each function: its component, target and source hash
            run.store.add_event("reward_funcs", f"reward functions {', '.join(reward_funcs.components)}", stage="rl",
                                step=0, payload={"verifier": reward_funcs.name, "revision": reward_funcs.revision,
                                                 "funcs": reward_funcs.manifest()})
        if getattr(grader, "manifest_key", None) == "reward_model":  # its calibration on the audit sets, in the store
            run.store.add_event("reward_model", f"reward model {grader.cfg.path}", stage="rl", step=0,
                                payload=grader.grader.manifest())
        if envs.mixed and sft_counts:
            run.store.add_event("sft_mixture", "SFT demonstrations per environment", stage="sft", step=0,
                                payload={n: {"demos": c, "share": c / max(1, len(demos))} for n, c in sft_counts.items()})
    else:
        run.store.add_event("resume", f"resumed at RL step {rl_state.step}", stage="rl", step=rl_state.step,
                            payload={"config_sha256": sha256_text(config_yaml)})

    place_policy(model, recipe)  # model.device, autocast, gradient checkpointing
    rl_episodes = ray_backend.backend_episodes(recipe, episodes, model=model, tokenizer=tokenizer, hashes=hashes,
                                               store=run.store, spec_ref=envs.routes_ref(recipe))  # run.backend: ray
    clean_engine = build_engine(recipe.engine, model, tokenizer, seed=seed, max_model_len=envs.max_tokens,
                                device=model_device(model))
    engine = wrap_engine(clean_engine, recipe.faults)  # faults.engine_error: failing rows in training rollouts
    if hasattr(episodes, "span_log"):
        episodes.span_log = run.path / "gateway_spans.jsonl"
    summary_path = run.path / "summary.json"
    heldout = HeldoutEval(recipe, envs, run=run, engine=clean_engine, model=model, hashes=hashes, episodes=episodes,
                          summary_path=summary_path)
    version = rl_state.policy_version if rl_state else 0
    rl_steps_done = rl_state.step if rl_state else 0
    last_stage = "rl" if rl_state else "base"
    reference = {"model": load_reference(ckpt, model) if resume is not None else None}

    def on_ckpt(step: int, state: RLState) -> None:
        save_checkpoint(run.checkpoints / f"step_{step}", model, tokenizer, state={"stage": "rl", **state.as_dict()},
                        reference=reference["model"], marks=run.marks(), shards=getattr(state, "write_shards", None))

    loggers = MetricLoggers(run, recipe.loggers, hparams=recipe.model_dump(mode="json"))
    for stage in stages:
        attach_lora_if_due(model, tokenizer, recipe, stage=stage, run_path=run.path)  # the tiny model: after its SFT
        sync_weights(clean_engine, model, version)  # an engine with its own weights sees what SFT changed
        if stage in ("sft", "rft"):  # an rft stage is a rejection-sampled SFT pass (run/sft_stage.py)
            run_sft_stage("rejection" if stage == "rft" else recipe.sft.source, stage=stage, recipe=recipe, model=model,
                          tokenizer=tokenizer, engine=engine, spec=envs.rollout_spec(), demos=demos,
                          train_tasks=envs.train_tasks(), run=run, hashes=hashes, policy_version=version,
                          step=rl_steps_done, loggers=loggers, say=_say)
            version += 1
            last_stage = stage
        elif stage == "eval":
            heldout.say(heldout.evaluate(rl_steps_done, version, last_stage), last_stage)
        elif stage == "rl":
            state = run_rl_stages(recipe, envs, rl_state or RLState(policy_version=version), run=run, model=model,
                                  tokenizer=tokenizer, engine=engine, hashes=hashes, reference=reference,
                                  heldout=heldout, log=lambda m, s: loggers.log(m, stage="rl", step=s),
                                  on_checkpoint=on_ckpt, grader=grader, episodes=rl_episodes)
            version, rl_steps_done, last_stage = state.policy_version, state.step, "rl"
    final = run.checkpoints / f"step_{rl_steps_done}"
    if not final.exists():
        save_checkpoint(final, model, tokenizer, state={"stage": last_stage, "step": rl_steps_done,
                                                        "policy_version": version})
    return _finish(recipe, run, heldout, episodes, loggers, summary_path, t_start)


def _preflight(recipe: Recipe, stages: list[str]):
    """What must fail before anything is written: the sandbox runtime, devices / peft / LoRA targets, the engine,
    the judge and the gateway agent. Returns (grader role or None, what plays the episodes)."""
    configure_sandbox(recipe.sandbox)
    check_model_setup(recipe)  # train/model_setup.py
    device = resolve_device(recipe.model.device)
    if engine_problem(recipe.engine, device):  # vllm without vLLM or a GPU, prepack off a CPU: nothing written
        raise UserError(engine_problem(recipe.engine, device))
    record.reset()  # where this run's roles run (placement/record.py): the grader's actor first
    grader = GraderRole.build(recipe.roles.grader, default_device=recipe.model.device,  # calibrated on the audit sets
                              envs=[e.name for e in recipe.envs] or [recipe.env.name], placement=recipe.placement.grader,
                              threads=recipe.run.threads) if "rl" in stages else None
    if grader is None and recipe.roles.reward_model is not None and "rl" in stages:  # a Bradley-Terry reward model
        from tracerl.train.reward_model_role import RewardModelRole

        grader = RewardModelRole.build(recipe.roles.reward_model, default_device=recipe.model.device,
                                       envs=[e.name for e in recipe.envs] or [recipe.env.name])
    return grader, gateway_rollout(recipe)  # an external agent through the gateway, else the agent loop


def _build_tiny_model(recipe: Recipe, run, envs: RunEnvs, demos):
    """The built-in tiny model and its tokenizer, trained on the demonstrations and held-out prompts."""
    tiny, t0 = recipe.model.tiny, time.time()
    corpus = demo_texts(demos) + envs.heldout_prompts()
    if not demos:  # no SFT examples (a reward: recipe without sft.data): the training rows name the vocabulary
        corpus += [f"{t.prompt} {t.answer}" for t in envs.train_tasks()]
    model_dir = build_tiny(run.path / "base_model", corpus, tags=envs.special_tokens(), vocab_size=tiny.vocab_size,
                           hidden_size=tiny.hidden_size, num_layers=tiny.num_layers, num_heads=tiny.num_heads,
                           intermediate_size=tiny.intermediate_size, max_positions=tiny.max_positions,
                           seed=recipe.run.seed, individual_digits=tiny.individual_digits)
    model, tokenizer = load_model_and_tokenizer(model_dir, dtype=recipe.model.dtype)
    n_params = sum(p.numel() for p in model.parameters())
    _say(f"built tiny model ({n_params / 1e6:.2f}M parameters, vocab {len(tokenizer)}) in {time.time() - t0:.1f}s")
    return model, tokenizer


def _finish(recipe: Recipe, run, heldout, episodes, loggers, summary_path: Path, t_start: float) -> RunResult:
    """Write summary.json, print the before/after table, close the gateway, loggers and store."""
    evals = heldout.evals
    result = RunResult(run.path, [e for e in evals if not e["after"].startswith("rl step")], time.time() - t_start)
    summary_path.write_text(json.dumps({"evals": evals, "wall_s": result.wall_s}, indent=2))
    heldout.print_domains(result)
    _print_table(result, recipe)
    if hasattr(episodes, "close"):
        episodes.close()
        (run.path / "gateway.json").write_text(json.dumps(episodes.totals, indent=2))
        _say(f"gateway: {episodes.totals}")
    loggers.close()
    run.close()
    return result


def _open_run(recipe: Recipe, resume, stages: list[str]):
    """The run directory and what it starts from: a resumed run's checkpoint, model, RNG and RL state, or a new
    directory (after the conversations file and `model.path` load, so a bad one writes nothing). Returns
    (run, checkpoint or None, stages left, model, tokenizer, RLState or None, file demos or None); model and
    tokenizer are None for a tiny model still to build."""
    model = tokenizer = rl_state = file_demos = ckpt = None
    if resume is not None:
        run = RunDir(resume)
        for name in run.sweep_leftovers():  # half-written checkpoints of the killed process
            _say(f"removed the interrupted write {name}")
        ckpt, saved, stages = _resume_point(run, recipe)
        model, tokenizer = load_checkpoint_model(ckpt, dtype=recipe.model.dtype)  # verified; a LoRA one: base + adapter
        restore_rng(saved)
        rl_state = RLState.from_dict(saved)
        _say(f"resuming {run.path} from {ckpt.name} (policy version {rl_state.policy_version})")
    else:
        file_demos = load_sft_data(recipe)  # a bad conversations file fails before anything is written
        if recipe.model.path is not None:  # a bad path fails before anything is written
            model, tokenizer = load_model_and_tokenizer(recipe.model.path, gguf_file=recipe.model.gguf_file,
                                                        dtype=recipe.model.dtype, template_fallback=(
                                                            recipe.model.chat_template == "hermes"
                                                            or recipe.env.tool_format == "native"))
            attach_lora_if_due(model, tokenizer, recipe, stage="load")  # peft refusing the model fails here
        run = RunDir(recipe.run.dir, create=True) if recipe.run.dir else RunDir.new(recipe.run.root, recipe.run.name)
        _say(f"run directory: {run.path}")
    return run, ckpt, stages, model, tokenizer, rl_state, file_demos


def gateway_rollout(recipe: Recipe):
    """`run_episodes`, or the gateway rollout of `recipe.gateway.agent`."""
    if recipe.gateway.agent is None:
        from tracerl.rollout import run_episodes

        return run_episodes
    from tracerl.serve.rollout import GatewayRollout

    return GatewayRollout(recipe.gateway)
