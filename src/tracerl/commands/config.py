"""`tracerl config show [RECIPE] [key.sub=value ...]`: the resolved recipe, each field with its doc.

The output is YAML (loadable back as a recipe) with every field's description as a comment, so a
reader sees what each value means and what an override would change before anything runs.
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel


def register(sub) -> None:
    p = sub.add_parser("config", help="show a recipe resolved with overrides, every field with its doc")
    csub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    show = csub.add_parser("show", help="print the resolved recipe as commented YAML")
    show.add_argument("recipe", nargs="?", default="default", help="shipped recipe name or path to a YAML file")
    show.add_argument("overrides", nargs="*", help="key.sub=value overrides, e.g. rl.stages.0.steps=3")
    show.add_argument("--no-docs", action="store_true", help="plain YAML without the field comments")
    show.set_defaults(func=run)


def _scalar(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _doc(field, owner: type[BaseModel], name: str) -> str:
    """The field's description; an undocumented discriminator (`name` of an algorithm) borrows the
    first sentence of its model's docstring, which says what that choice is."""
    text = field.description or ""
    if not text and name == "name" and owner.__doc__:
        text = owner.__doc__.strip().split("\n\n")[0]
    text = " ".join(text.split())
    return text if len(text) <= 160 else text[:159] + "…"


def render(model: BaseModel, *, docs: bool = True, indent: int = 0) -> list[str]:
    """Commented YAML lines of a pydantic model's values, in field order."""
    pad, lines = "  " * indent, []
    dumped = model.model_dump(mode="json")
    for name, field in type(model).model_fields.items():
        doc = _doc(field, type(model), name) if docs else ""
        value, comment = getattr(model, name), f"  # {doc}" if doc else ""
        if isinstance(value, BaseModel):
            lines.append(f"{pad}{name}:{comment}")
            lines += render(value, docs=docs, indent=indent + 1)
        elif isinstance(value, list) and value and isinstance(value[0], BaseModel):
            lines.append(f"{pad}{name}:{comment}")
            for item in value:
                body = render(item, docs=docs, indent=indent + 2)
                lines.append(f"{pad}  - " + body[0].lstrip())
                lines += body[1:]
        else:
            lines.append(f"{pad}{name}: {_scalar(dumped[name])}{comment}")
    return lines


def run(args) -> int:
    from tracerl.config import load_recipe

    recipe_arg, overrides = args.recipe, list(args.overrides)
    if "=" in recipe_arg:  # `tracerl config show rl.steps=5`: an override of the default recipe
        overrides.insert(0, recipe_arg)
        recipe_arg = "default"
    recipe = load_recipe(recipe_arg, overrides)
    print(f"# recipe {recipe_arg}" + (f" with {' '.join(overrides)}" if overrides else "")
          + f"; episodes per RL step = prompts_per_step x group_size = {recipe.episodes_per_step}")
    print("\n".join(render(recipe, docs=not args.no_docs)))
    return 0
