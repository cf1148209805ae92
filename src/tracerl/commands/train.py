"""`tracerl train [RECIPE] [key.sub=value ...]`: run a shipped recipe or a YAML file."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("train", help="run a recipe (default: build tiny model -> sft -> eval -> rl -> eval)")
    p.add_argument("recipe", nargs="?", default="default", help="shipped recipe name or path to a YAML file")
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides, e.g. rl.steps=10 run.dir=/tmp/run")
    p.set_defaults(func=run)


def run(args) -> int:
    from tracerl.config import load_recipe

    recipe_arg, overrides = args.recipe, list(args.overrides)
    if "=" in recipe_arg:  # `tracerl train rl.steps=5`: an override, not a recipe name
        overrides.insert(0, recipe_arg)
        recipe_arg = "default"
    recipe = load_recipe(recipe_arg, overrides)  # fails before anything runs

    from tracerl.train.pipeline import run_recipe

    run_recipe(recipe)
    return 0
