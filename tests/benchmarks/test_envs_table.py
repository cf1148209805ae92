"""The environment benchmark's summary: wins per env over seeds, and envs that won at every seed."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("bench_envs", Path(__file__).parents[2] / "benchmarks" / "envs.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_summary_counts_wins_per_env_and_envs_that_won_at_every_seed():
    rows = [{"env": "a", "sft": 0.2, "rl": 0.5}, {"env": "a", "sft": 0.3, "rl": 0.4},
            {"env": "b", "sft": 0.5, "rl": 0.4}, {"env": "b", "sft": 0.1, "rl": 0.3}]
    lines = bench.summary_lines(rows)
    assert lines[0] == "a              RL > SFT in 2 of 2 seeds, mean gain +0.200"  # (0.3 + 0.1) / 2
    assert lines[1] == "b              RL > SFT in 1 of 2 seeds, mean gain +0.050"  # (-0.1 + 0.2) / 2
    assert lines[-1] == "RL beats SFT on held-out success at every seed run in 1 of 2 environments"


def test_math_tool_runs_the_default_recipe():
    assert "math_tool" in bench.SUITE and bench.RECIPE["math_tool"] == "default"
