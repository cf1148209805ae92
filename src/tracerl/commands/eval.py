"""`tracerl eval CHECKPOINT_OR_RUN [--env NAME] [--split heldout] [--n 8] [--k 1,4,8]`.

Samples n episodes per held-out task from a checkpoint (or a run's latest checkpoint) and reports
avg@n, unbiased pass@k, maj@k and tool-use statistics under a `Protocol` record written beside the
numbers (`<root>/eval/<protocol column>/<checkpoint>/`). For a run directory the task set, budgets
and seed come from its config.yaml, so the held-out tasks are the ones the run never trained on;
the results are also logged to the run as `eval/<name>` metrics at the checkpoint's step (`eval/<env>/<name>`
for one environment of an `envs:` run, as training logs it), with the protocol column as the tag
`eval/protocol` (`eval/<env>/protocol`) beside them.

Nothing evaluated here can run code: a checkpoint with a MANIFEST.json is verified (every path inside the
folder, every size and hash) before anything is read, its trainer state is JSON and safetensors, and a
folder that does not parse is refused in one sentence (train/checkpoint.py `load_checkpoint_model`).
"""

from __future__ import annotations

from pathlib import Path

from tracerl.errors import UserError


def register(sub) -> None:
    p = sub.add_parser("eval", help="evaluate a checkpoint on held-out tasks under a recorded protocol")
    p.add_argument("target", metavar="CHECKPOINT_OR_RUN",
                   help="a checkpoint directory, a run directory (its latest checkpoint) or RUN/checkpoints/step_N")
    p.add_argument("--env", default=None, help="environment name (default: the run's)")
    p.add_argument("--split", choices=("heldout",), default="heldout",
                   help="task split; only held-out tasks (never rewarded in training) are evaluated")
    p.add_argument("--n", type=int, default=8, help="samples per task (default 8)")
    p.add_argument("--k", default="1,4,8", help="comma-separated k values of pass@k and maj@k (default 1,4,8)")
    p.add_argument("--tasks", type=int, default=None, help="number of held-out tasks (default: the recipe's eval.tasks)")
    p.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the recipe's eval.temperature)")
    p.add_argument("--top-p", type=float, default=None, help="nucleus mass (default: the recipe's eval.top_p)")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (default: the run's seed + 7919)")
    p.add_argument("--out", default=None, help="folder to write eval/<column>/... under (default: the run, or the checkpoint)")
    p.set_defaults(func=run)


def _parse_ks(text: str, n: int) -> list[int]:
    try:
        ks = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise UserError(f"--k {text!r} must be comma-separated integers, e.g. --k 1,4,8") from None
    if not ks or ks[0] < 1 or ks[-1] > n:
        raise UserError(f"--k {text!r} needs values between 1 and --n {n}; raise --n or drop the larger k")
    return ks


def metric_prefix(recipe, env: str) -> str:
    """`eval/<env>` for one environment of an `envs:` run (the names its training evaluations use), else `eval`."""
    return f"eval/{env}" if recipe.envs else "eval"


def _resolve(target: Path):
    """(run directory or None, checkpoint directory, recipe)."""
    import yaml

    from tracerl.config import Recipe
    from tracerl.store import RunDir

    ckpt = None
    if target.parent.name == "checkpoints" and (target.parent.parent / "store.sqlite").exists():
        ckpt, target = target, target.parent.parent  # a run's own checkpoint: evaluate it under the run's recipe
    if (target / "store.sqlite").exists():
        run = RunDir(target)
        ckpt = ckpt or run.latest_checkpoint()
        if ckpt is None:
            raise UserError(f"run {target} has no checkpoints/step_N; train it first or pass a checkpoint directory")
        data = yaml.safe_load(run.config_path.read_text()) if run.config_path.exists() else {}
        return run, ckpt, Recipe.model_validate(data or {})
    if (target / "config.json").exists() or (target / "MANIFEST.json").exists():
        return None, target, Recipe()
    raise UserError(f"{target} is neither a run directory (store.sqlite) nor a checkpoint (config.json)")


def _policy_version(ckpt: Path) -> int:
    """The checkpoint's policy version from its trainer state (0 for a plain model folder, which has none)."""
    from tracerl.store.checkpoints import MANIFEST, OLD_STATE, STATE_FILES
    from tracerl.train.checkpoint import load_trainer_state

    if not any((ckpt / f).exists() for f in (MANIFEST, OLD_STATE, *STATE_FILES)):
        return 0
    version = load_trainer_state(ckpt).get("policy_version", 0)  # verified and parsed, never unpickled
    if isinstance(version, bool) or not isinstance(version, int):
        raise UserError(f"checkpoint {ckpt} records policy version {version!r}, not an integer; restore the checkpoint")
    return version


def run(args) -> int:
    if args.n < 1:
        raise UserError(f"--n {args.n} must be at least 1")
    ks = _parse_ks(args.k, args.n)
    target = Path(args.target)
    if not target.is_dir():
        raise UserError(f"{target} does not exist; pass a checkpoint directory or a run directory")
    run_dir, ckpt, recipe = _resolve(target)
    version = _policy_version(ckpt)  # verifies a checkpoint's manifest before anything of it is loaded
    if run_dir is None and args.env is None:
        raise UserError("a bare checkpoint needs --env NAME (`tracerl envs` lists them)")

    from transformers.utils import logging as hf_logging

    from tracerl.envs import get_env
    from tracerl.eval.heldout import run_heldout
    from tracerl.eval.protocol import results_dir
    from tracerl.eval.record import heldout_protocol, record_evaluation
    from tracerl.models import tokenizer_hashes
    from tracerl.rollout import LoopBudgets, TorchEngine
    from tracerl.train.checkpoint import load_checkpoint_model

    env_cfg, spec = recipe.env, None
    if recipe.envs:  # a run over several environments: evaluate one of them, under its own budgets
        from tracerl.run.multienv import resolve_routes

        routes = {r.name: r for r in resolve_routes(recipe)}
        if args.env not in routes:
            raise UserError(f"this run trains several environments ({', '.join(routes)}); pick one with --env NAME")
        env_cfg, spec = routes[args.env].env, routes[args.env].spec
    spec = spec or get_env(args.env or recipe.env.name)
    seed = args.seed if args.seed is not None else recipe.run.seed + 7919
    tasks = spec.generate("heldout", env_cfg.heldout_tasks, recipe.run.seed, tuple(env_cfg.heldout_difficulty))
    tasks = tasks[: args.tasks or recipe.eval.tasks]
    if not tasks:
        raise UserError(f"environment {spec.name} generated no held-out tasks; raise env.heldout_tasks")
    sampling = {"temperature": args.temperature if args.temperature is not None else recipe.eval.temperature,
                "top_p": args.top_p if args.top_p is not None else recipe.eval.top_p, "top_k": 0}
    budgets = LoopBudgets.from_env(env_cfg)

    hf_logging.disable_progress_bar()
    model, tokenizer = load_checkpoint_model(ckpt, key="CHECKPOINT_OR_RUN")
    hashes = tokenizer_hashes(tokenizer)
    protocol = heldout_protocol(model=model, tokenizer_hashes=hashes, spec=spec, tasks=tasks, sampling=sampling,
                                budgets=budgets, n=args.n, ks=ks, seed=seed, split=args.split)
    res = run_heldout(TorchEngine(model, tokenizer), spec, tasks, samples=args.n, ks=ks, budgets=budgets,
                      sampling=sampling, policy_version=version, seed=seed, tokenizer_hashes=hashes)
    out_root = Path(args.out) if args.out else (run_dir.path if run_dir else ckpt)
    step = int(ckpt.name.split("_")[1]) if run_dir is not None else None
    results = record_evaluation(out_root, protocol, res.trajectories, run=run_dir, step=step,
                                extra={"wall_s": res.wall_s}, prefix=metric_prefix(recipe, spec.name))
    if run_dir is not None:
        run_dir.close()
    where = results_dir(out_root, protocol)
    print(f"{spec.name} held-out, {len(tasks)} tasks x {args.n} samples, checkpoint {ckpt}")
    print(f"protocol column {protocol.column} (checkpoint {protocol.checkpoint_sha256[:12]}), "
          f"temperature {sampling['temperature']}, top_p {sampling['top_p']}, budgets {protocol.budgets}")
    for name, value in results.items():
        print(f"  {name:<24} {value:.4f}")
    print(f"wrote {where}")
    return 0
