"""benchmarks/multi_env.py: every contender's recipe loads and gives each domain the same RL budget."""

import importlib.util
import sys
from pathlib import Path

import pytest

from tracerl.config import load_recipe
from tracerl.run.multienv import stage_envs
from tracerl.run.stages import rl_stages

_spec = importlib.util.spec_from_file_location("bench_multi_env", Path(__file__).parents[2] / "benchmarks" / "multi_env.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench_multi_env"] = bench
_spec.loader.exec_module(bench)


@pytest.mark.parametrize("name, overrides", list(bench.contenders(steps=3, prompts=6).items()))
def test_every_contender_gives_each_trained_domain_s_times_p_tasks(name, overrides):
    recipe = load_recipe("multi_env", [*bench.PRESETS["small"], *bench.COMMON, "rl.prompts_per_step=6", *overrides,
                                       "stages=[eval,rl,eval]", "model.path=/nonexistent"])
    tasks = {d: 0.0 for d in bench.DOMAINS}
    for st, envs in zip(rl_stages(recipe), stage_envs(recipe)):
        for d in envs:
            tasks[d] += (st.end - st.start) * st.recipe.rl.prompts_per_step / len(envs)  # equal shares
    trained = [d for d in bench.DOMAINS if tasks[d]]
    assert all(tasks[d] == 3 * 6 for d in trained)
    assert trained == (list(bench.DOMAINS) if not name.startswith("only-") else [name[len("only-"):]])


def test_table_reports_the_gap_and_the_best_cascade():
    def row(name, seed, m, c, s):
        return {"contender": name, "seed": seed, "math_tool": m, "code_tests": c, "search_qa": s,
                **{f"start/{d}": 0.1 for d in bench.DOMAINS}}

    rows = [row("mixture", 0, 0.5, 0.4, 0.3), row("only-math_tool", 0, 0.52, 0.1, 0.1),
            row("cascade-math-code-search", 0, 0.3, 0.3, 0.3), row("cascade-search-code-math", 0, 0.4, 0.3, 0.3)]
    out = bench.table(rows)
    assert "mixture vs only-math_tool on math_tool: -0.020" in out
    assert "best cascade order: cascade-search-code-math (mean 0.333" in out


def test_paired_gap_and_its_standard_error_by_hand():
    def row(name, seed, m):
        return {"contender": name, "seed": seed, "math_tool": m, "code_tests": 0.0, "search_qa": 0.0,
                **{f"start/{d}": 0.1 for d in bench.DOMAINS}}

    # gaps per seed: -0.10, 0.00, +0.04 -> mean -0.02; sample var (0.0064 + 0.0004 + 0.0036) / 2 = 0.0052;
    # SE = sqrt(0.0052 / 3) = 0.0416; seed 3 has no only-math_tool run and is left out of the pairing
    rows = [row("mixture", 0, 0.30), row("only-math_tool", 0, 0.40), row("mixture", 1, 0.25), row("only-math_tool", 1, 0.25),
            row("mixture", 2, 0.44), row("only-math_tool", 2, 0.40), row("mixture", 3, 0.9)]
    out = bench.table(rows)
    assert "(paired over 3 seeds: -0.020 ± 0.042 SE; per seed -0.100 / +0.000 / +0.040)" in out
