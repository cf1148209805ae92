"""The Python API: `tracerl.train(recipe, **overrides)`, what `tracerl train` runs (commands/train.py).

    import tracerl
    run = tracerl.train("examples/own_reward/recipe.yaml", rl={"steps": 20}, **{"run.seed": 1})
    run.heldout          # [{"after": "sft", "eval/success": 0.41, ...}, {"after": "rl", ...}]
    run.checkpoint       # runs/own_reward-.../checkpoints/step_20 (a Hugging Face model folder)

`recipe` is a shipped recipe's name, a YAML path, a dict shaped like a recipe, or a `Recipe`.
Overrides are keyword arguments: a dotted name (`**{"rl.steps": 5}`) or a section as a nested dict
(`rl={"steps": 5}`), and positional `key=value` strings exactly as on the command line; they are
applied in that order (strings first) and checked like the CLI's (an unknown key names the nearest
valid one). Everything the CLI checks before a run directory exists is checked here too: the recipe,
its task files, the environment, a `reward:` section's functions (looked up next to the recipe file,
then in the current directory).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tracerl.errors import UserError


@dataclasses.dataclass
class Run:
    """A finished run: where it is and what it measured."""

    run_dir: Path
    heldout: list[dict]
    """One row per eval stage, in order: `after` (the stage it followed) and the `eval/*` numbers."""
    metrics_path: Path
    """metrics.jsonl: one JSON object per logged step (also in the run's store.sqlite)."""
    checkpoint: Path | None
    """The final checkpoint, a Hugging Face model folder (`AutoModelForCausalLM.from_pretrained`)."""
    wall_s: float

    @property
    def success(self) -> dict[str, float]:
        """Held-out success by eval stage label (`{"sft": 0.41, "rl": 0.63}`; a repeated label keeps the last)."""
        return {row["after"]: row["eval/success"] for row in self.heldout}

    def metrics(self) -> list[dict]:
        """Every row of metrics.jsonl."""
        if not self.metrics_path.exists():
            return []
        return [json.loads(line) for line in self.metrics_path.read_text().splitlines() if line.strip()]


def _flatten(prefix: str, value: Any, out: list[tuple[str, Any]]) -> None:
    if isinstance(value, Mapping) and value:
        for k, v in value.items():
            _flatten(f"{prefix}.{k}", v, out)
    else:
        out.append((prefix, value))


def override_strings(overrides: Mapping[str, Any]) -> list[str]:
    """Keyword overrides as the CLI's `key.sub=value` strings (values written as JSON, which YAML reads back)."""
    flat: list[tuple[str, Any]] = []
    for key, value in overrides.items():
        _flatten(key, value, flat)
    try:
        return [f"{k}={json.dumps(v)}" if v is not None else f"{k}=" for k, v in flat]
    except TypeError as err:
        raise UserError(f"an override value cannot be written as YAML ({err}); pass numbers, strings, lists or dicts") from None


def load(recipe: Any = "default", overrides: list[str] | None = None):
    """A validated `Recipe` from a name, a path, a dict or a `Recipe`, with `key=value` overrides applied."""
    from pydantic import ValidationError

    from tracerl.config import Recipe, load_recipe
    from tracerl.config.loading import _apply_override, _explain

    if isinstance(recipe, (str, Path)):
        return load_recipe(str(recipe), overrides)
    if isinstance(recipe, Recipe):
        data, source = recipe.model_dump(mode="json", exclude_unset=False), "the Recipe given"
    elif isinstance(recipe, Mapping):
        data, source = json.loads(json.dumps(dict(recipe))), "the recipe dict"
    else:
        raise UserError(f"a recipe is a name, a YAML path, a dict or a Recipe, not a {type(recipe).__name__}")
    applied = {}
    for item in overrides or []:
        applied[_apply_override(data, item)] = item
    try:
        return Recipe.model_validate(data)
    except ValidationError as err:
        raise UserError(_explain(err, source, applied)) from None


def _recipe_dir(recipe: Any) -> list[Path]:
    """Where a reward: section's `module:function` files are looked up first: the recipe file's folder."""
    if isinstance(recipe, (str, Path)) and Path(recipe).is_file():
        return [Path(recipe).resolve().parent]
    return []


def train(recipe: Any = "default", /, *cli_overrides: str, resume: str | Path | None = None, **overrides: Any) -> Run:
    """Run `recipe` end to end (or continue `resume`, a run directory) and return the `Run`.

    Raises `UserError` (one sentence) for a bad recipe, task file, environment or reward function,
    before any run directory is written."""
    strings = list(cli_overrides) + override_strings(overrides)
    search = _recipe_dir(recipe)
    if resume is not None:
        from tracerl.store import RunDir

        config = RunDir(resume).config_path  # the run's own resolved config
        if not config.exists():
            raise UserError(f"{resume} has no config.yaml; it cannot be resumed")
        recipe = str(config)
    cfg = load(recipe, strings)
    from tracerl.envs import get_env
    from tracerl.envs.dataset import install
    from tracerl.tasks.sources import check_sources

    # a missing, empty or all-bad task file (or an unknown generator env): before any run dir
    check_sources(cfg.tasks.sources, generator_of=get_env)
    install(cfg, search)  # a reward: section's functions and their signatures
    get_env(cfg.env.name)  # an unknown env (a forgotten --import) fails before the run directory exists

    from tracerl.run.pipeline import run_recipe
    from tracerl.store import RunDir

    result = run_recipe(cfg, resume=resume)
    run_dir = Path(result.run_dir)
    ckpt = RunDir(run_dir).latest_checkpoint() if (run_dir / "store.sqlite").exists() else None
    return Run(run_dir, list(result.evals), run_dir / "metrics.jsonl", ckpt, result.wall_s)
