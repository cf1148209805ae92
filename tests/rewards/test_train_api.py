"""`tracerl.train(...)` from Python runs the README example (examples/own_reward) and returns its held-out table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import tracerl
from tracerl.api import load, override_strings
from tracerl.errors import UserError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own_reward"


def test_overrides_dotted_and_nested_become_cli_strings():
    assert override_strings({"rl.steps": 5, "rl": {"lr": 0.001, "algorithm": {"name": "rloo"}},
                             "reward": {"funcs": ["r:f"]}, "sft.data": None}) == [
        "rl.steps=5", "rl.lr=0.001", "rl.algorithm.name=\"rloo\"", "reward.funcs=[\"r:f\"]", "sft.data="]


def test_load_takes_a_dict_and_names_a_bad_key():
    recipe = load({"run": {"seed": 3}}, ["rl.steps=2"])
    assert recipe.run.seed == 3 and recipe.rl.steps == 2
    with pytest.raises(UserError, match="rl.stepz"):
        load({}, ["rl.stepz=2"])


def test_train_runs_the_readme_example(tmp_path, monkeypatch):
    for name in ("recipe.yaml", "rewards.py", "arith.jsonl", "demos.jsonl"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    run = tracerl.train("recipe.yaml", "sft.epochs=2", rl={"steps": 2, "prompts_per_step": 4, "group_size": 4},
                        **{"eval.tasks": 8, "eval.samples": 1, "eval.k": [1], "run.root": str(tmp_path / "runs")})
    assert isinstance(run, tracerl.Run)
    assert [row["after"] for row in run.heldout] == ["sft", "rl"]
    assert set(run.success) == {"sft", "rl"} and all(0.0 <= v <= 1.0 for v in run.success.values())
    assert run.checkpoint is not None and run.checkpoint.name == "step_2" and (run.checkpoint / "config.json").exists()
    rows = run.metrics()
    assert any(r.get("stage") == "rl" for r in rows) and run.metrics_path.exists()
    config = (run.run_dir / "config.yaml").read_text()
    assert f"{tmp_path.resolve() / 'rewards.py'}:correct" in config  # the function that ran, by file
    import sqlite3

    db = sqlite3.connect(run.run_dir / "store.sqlite")
    (payload,) = db.execute("SELECT payload FROM events WHERE kind = 'reward_funcs'").fetchone()
    assert json.loads(payload)["funcs"]["correct"]["revision"]
