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
    from tracerl.api import train

    recipe_arg, overrides = args.recipe, list(args.overrides)
    if "=" in recipe_arg:  # `tracerl train rl.steps=5`: an override, not a recipe name
        overrides.insert(0, recipe_arg)
        recipe_arg = "default"
    result = train(recipe_arg, *overrides, resume=args.resume)  # tracerl/api.py: every check, then the run
    print(next_line(result.run_dir))
    return 0


def next_line(run_dir) -> str:
    """What to do with a finished run: the report, the inspector, an export, the last checkpoint."""
    from tracerl.store import RunDir

    ckpt = RunDir(run_dir, create=False).latest_checkpoint() if (run_dir / "store.sqlite").exists() else None
    return (f"next: tracerl report {run_dir} | tracerl inspect {run_dir} | "
            f"tracerl export {run_dir} --stage eval --out heldout.jsonl"
            + (f" | checkpoint {ckpt}" if ckpt else ""))
