"""`tracerl tasks check FILE`, `tracerl tasks stats TARGET`, `tracerl tasks profile TARGET --model PATH`.

TARGET is a task file (.jsonl, .parquet, or a directory saved with `Dataset.save_to_disk`), a YAML
file holding only a `tasks:` section, or a recipe (shipped name or YAML path). A recipe without a
task section gets its tasks from its environment's generator, exactly as `tracerl train` does.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tracerl.errors import UserError


def register(sub) -> None:
    p = sub.add_parser("tasks", help="validate task files, show pool statistics, profile difficulty")
    tsub = p.add_subparsers(dest="tasks_command", metavar="TASKS_COMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    c = tsub.add_parser("check", help="validate a task file; print each bad row; exit 1 if any row is bad")
    c.add_argument("file", help="a .jsonl or .parquet task file, or a directory saved with Dataset.save_to_disk")
    c.add_argument("--license", default=None, help="license of rows that declare none")
    c.add_argument("--split", choices=("train", "heldout"), default="train", help="split of rows that declare none")
    c.set_defaults(func=run_check)

    s = tsub.add_parser("stats", help="pre- and post-filter distributions by source and difficulty bucket")
    s.add_argument("target", help="task file, YAML with a `tasks:` section, or recipe")
    s.add_argument("--profile", default=None, help="difficulty profile JSON (pass-rate buckets, all-pass/all-fail filters)")
    s.add_argument("--license", default=None, help="license of rows that declare none (task files only)")
    s.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                   help="set a filter option, e.g. --filter exact_duplicates=true --filter min_prompt_words=4")
    s.set_defaults(func=run_stats)

    pr = tsub.add_parser("profile", help="sample N attempts per training task under a model; write pass rates (JSON)")
    pr.add_argument("target", help="task file, YAML with a `tasks:` section, or recipe")
    pr.add_argument("--model", default=None, help="local Hugging Face model directory (default: the recipe's model.path)")
    pr.add_argument("--n", type=int, default=8, help="attempts per task (default 8)")
    pr.add_argument("--env", default=None, help="environment that poses the tasks (default: the recipe's, else math_tool)")
    pr.add_argument("--out", default=None, help="profile JSON to write (default: <target stem>.profile.json)")
    pr.add_argument("--license", default=None, help="license of rows that declare none (task files only)")
    pr.add_argument("--limit", type=int, default=None, help="profile only the first N training tasks")
    pr.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    pr.add_argument("--seed", type=int, default=0, help="sampling seed")
    pr.add_argument("--batch-size", type=int, default=32, help="tasks per engine call")
    pr.set_defaults(func=run_profile)


def run_check(args) -> int:
    from tracerl.tasks.sources import load_task_file

    src = load_task_file(args.file, license=args.license, split=args.split)
    if not src.tasks and not src.errors:  # an empty or all-blank file is not a task file that passes
        raise UserError(f"{args.file} holds no task rows (it is empty or blank); write one task per line, "
                        'e.g. {"id": "t1", "prompt": "What is 2+3?", "answer": "5"}')
    for err in src.errors:
        print(err)
    status = "bad" if src.errors else "ok"
    print(f"{args.file}: {len(src.tasks)} good rows, {len(src.errors)} bad rows ({status}); "
          f"content sha256 {src.content_sha256[:16]}", file=sys.stderr)
    return 1 if src.errors else 0


def _first_error(err) -> str:
    first = err.errors()[0]
    return f"{'.'.join(map(str, first['loc']))}: {first['msg']}"


def resolve_target(target: str, license: str | None = None):
    """(TasksConfig, recipe or None) for a task file, a `tasks:`-only YAML, or a recipe."""
    import yaml
    from pydantic import ValidationError

    from tracerl.config.tasks import TasksConfig, TaskSourceConfig

    path = Path(target)
    low = target.lower()
    if low.endswith((".jsonl", ".parquet")) or path.is_dir():
        return TasksConfig(sources=[TaskSourceConfig(path=target, license=license)]), None
    if low.endswith((".yaml", ".yml")) and path.is_file():
        data = yaml.safe_load(path.read_text()) or {}
        if isinstance(data, dict) and set(data) == {"tasks"}:
            try:
                return TasksConfig.model_validate(data["tasks"]), None
            except ValidationError as err:
                raise UserError(f"{target!r}: tasks.{_first_error(err)}") from None
    from tracerl.config import load_recipe
    from tracerl.run.stages import recipe_tasks

    recipe = load_recipe(target)
    return recipe_tasks(recipe), recipe


def _with_filter_overrides(cfg, items: list[str]):
    import yaml
    from pydantic import ValidationError

    from tracerl.config.tasks import FilterConfig

    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise UserError(f"--filter {item!r} is not KEY=VALUE; e.g. --filter exact_duplicates=true")
        overrides[key] = yaml.safe_load(value)
    if overrides:
        try:
            cfg.filters = FilterConfig.model_validate({**cfg.filters.model_dump(), **overrides})
        except ValidationError as err:
            raise UserError(f"--filter {_first_error(err)}") from None
    return cfg


def run_stats(args) -> int:
    from tracerl.envs import get_env
    from tracerl.tasks.pipeline import build_pool, distribution, format_distributions, format_source_shares
    from tracerl.tasks.profile import DifficultyProfile

    cfg, _ = resolve_target(args.target, args.license)
    cfg = _with_filter_overrides(cfg, args.filter)
    prof = DifficultyProfile.load(args.profile) if args.profile else None
    pool = build_pool(cfg, profile=prof, generator_of=get_env)
    print(format_distributions(distribution(pool.loaded, pool.profile), distribution(pool.kept, pool.profile)))
    print()
    print(format_source_shares(pool.loaded, pool.kept, cfg.sampler.weights))
    counts = pool.ledger.counts()
    print("discarded: " + (", ".join(f"{k} {v}" for k, v in counts.items()) if counts else "none"))
    if pool.row_errors:
        print(f"bad rows not loaded: {len(pool.row_errors)} (see `tracerl tasks check`)")
    return 0


def run_profile(args) -> int:
    if args.n < 1:
        raise UserError(f"--n must be at least 1, got {args.n}")
    cfg, recipe = resolve_target(args.target, args.license)
    model_path = args.model or (recipe.model.path if recipe is not None else None)
    if not model_path:
        raise UserError("tasks profile needs a model: pass --model PATH (a local Hugging Face model directory)")

    import torch

    from tracerl.config import EnvConfig
    from tracerl.envs import get_env
    from tracerl.models import load_model_and_tokenizer, tokenizer_hashes
    from tracerl.rollout import LoopBudgets, TorchEngine
    from tracerl.rollout.attempts import engine_attempt_fn
    from tracerl.tasks.pipeline import build_pool
    from tracerl.tasks.profile import profile

    env_cfg = recipe.env if recipe is not None else EnvConfig()
    spec = get_env(args.env or env_cfg.name)
    # profile before filtering
    pool = build_pool(cfg.model_copy(update={"filters": type(cfg.filters)()}), generator_of=get_env)
    tasks = pool.train[: args.limit] if args.limit else pool.train
    if not tasks:
        raise UserError(f"{args.target!r} holds no training tasks to profile")
    if recipe is not None:
        torch.set_num_threads(recipe.run.threads)
    model, tokenizer = load_model_and_tokenizer(model_path)
    model.eval()
    attempt = engine_attempt_fn(TorchEngine(model, tokenizer), spec,
                                budgets=LoopBudgets.from_env(env_cfg),
                                sampling={"temperature": args.temperature, "top_p": 1.0, "top_k": 0}, seed=args.seed,
                                tokenizer_hashes=tokenizer_hashes(tokenizer))
    prof = profile(tasks, attempt, args.n, batch_size=args.batch_size, policy=str(model_path))
    prof.meta.update({"env": spec.name, "env_revision": spec.revision, "temperature": args.temperature,
                      "seed": args.seed, "pool": pool.manifest()["pool_sha256"]})
    out = Path(args.out or f"{Path(args.target).stem}.profile.json")
    prof.save(out)
    rates = [e.pass_rate for e in prof.entries.values() if e.attempts]
    zero, one = sum(r == 0 for r in rates), sum(r == 1 for r in rates)
    mean = sum(rates) / len(rates) if rates else float("nan")
    print(f"profiled {len(prof)} tasks × {args.n} attempts under {model_path}: mean pass rate {mean:.3f}, "
          f"{zero} never solved, {one} always solved; wrote {out}")
    return 0
