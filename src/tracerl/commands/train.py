"""`tracerl train [RECIPE] [key.sub=value ...]`: run a shipped recipe or a YAML file."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("train", help="run a recipe (default: build tiny model -> sft -> eval -> rl -> eval)")
    p.add_argument("recipe", nargs="?", default="default", help="shipped recipe name or path to a YAML file")
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides, e.g. rl.steps=10 run.dir=/tmp/run")
    p.add_argument("--resume", metavar="RUN_DIR", default=None,
                   help="continue RUN_DIR from its latest RL checkpoint (its config.yaml, plus any overrides)")
    p.set_defaults(func=run)


def run(args) -> int:
    from tracerl.config import load_recipe

    recipe_arg, overrides = args.recipe, list(args.overrides)
    if "=" in recipe_arg:  # `tracerl train rl.steps=5`: an override, not a recipe name
        overrides.insert(0, recipe_arg)
        recipe_arg = "default"
    if args.resume:
        from pathlib import Path

        from tracerl.store import RunDir

        recipe_arg = str(RunDir(args.resume).config_path)  # the run's own resolved config
        if not Path(recipe_arg).exists():
            from tracerl.errors import UserError

            raise UserError(f"{args.resume} has no config.yaml; it cannot be resumed")
    recipe = load_recipe(recipe_arg, overrides)  # fails before anything runs
    from tracerl.envs import get_env
    from tracerl.tasks.sources import check_sources

    # a missing, empty or all-bad task file (or an unknown generator env): before any run dir
    check_sources(recipe.tasks.sources, generator_of=get_env)

    get_env(recipe.env.name)  # an unknown env (a forgotten --import) fails before the run directory exists

    from tracerl.run.pipeline import run_recipe

    result = run_recipe(recipe, resume=args.resume)
    print(next_line(result.run_dir))
    return 0


def next_line(run_dir) -> str:
    """What to do with a finished run: the report, the inspector, an export, the last checkpoint."""
    from tracerl.store import RunDir

    ckpt = RunDir(run_dir, create=False).latest_checkpoint() if (run_dir / "store.sqlite").exists() else None
    return (f"next: tracerl report {run_dir} | tracerl inspect {run_dir} | "
            f"tracerl export {run_dir} --stage eval --out heldout.jsonl"
            + (f" | checkpoint {ckpt}" if ckpt else ""))
