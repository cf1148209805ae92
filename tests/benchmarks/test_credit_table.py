"""benchmarks/credit.py's per-episode statistics, worked by hand on two text_world-like episodes."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from credit import episode_stats  # noqa: E402
from tests_credit_helpers import episode  # noqa: E402


def test_episode_stats_by_hand():
    # A: s0 → s1 → s0 (a loop back: 1 repeated state) → s2, 4 turns, won
    a = episode("A", "g", ["s0", "s1", "s0", "s2"], [[3], [3], [3], [3]], 1.0)
    a.reward_components = {"success": 1.0}
    # B: s0 → s0 (an invalid action leaves the state: invalid, not a loop), 2 turns, lost
    b = episode("B", "g", ["s0", "s0"], [[3], [3]], 0.0)
    b.reward_components = {"success": 0.0}
    b.spans[-2].tool_status = "invalid_action"  # the observation between B's two turns
    st = episode_stats([a, b])
    # 6 turns in all; loops 1 (A's return to s0) → 1/6; invalid 1 (B) → 1/6; 3 turns per episode; 1 success
    assert st["turns"] == 3.0 and st["env_steps"] == 6.0 and st["successes"] == 1.0
    assert abs(st["repeat_rate"] - 1 / 6) < 1e-12 and abs(st["invalid_rate"] - 1 / 6) < 1e-12


def test_workplace_db_episode_stats_by_hand():
    # C: in s0 `find` [3] (the database is unchanged: s0), the same `find` [3] again (a repeated call in the
    # same state: a loop), `set` [5] (→ s1), `done` [6]; won ("correct")
    c = episode("C", "g", ["s0", "s0", "s0", "s1"], [[3], [3], [5], [6]], 1.0)
    # D: a blocked call [3] (stays in s0; invalid, not a loop), then `done` [7]; lost
    d = episode("D", "g", ["s0", "s0"], [[3], [7]], 0.0)
    d.spans[-2].tool_status = "blocked_action"
    st = episode_stats([c, d], success="correct", loop="repeat")
    # 6 turns; loops 1 (C's second find) → 1/6; invalid 1 (D's blocked call) → 1/6; 1 success
    assert st["turns"] == 3.0 and st["env_steps"] == 6.0 and st["successes"] == 1.0
    assert abs(st["repeat_rate"] - 1 / 6) < 1e-12 and abs(st["invalid_rate"] - 1 / 6) < 1e-12
    # text_world's rule would call both of C's finds loops (each "returns" to s0), and find no success
    tw = episode_stats([c, d])
    assert abs(tw["repeat_rate"] - 2 / 6) < 1e-12 and tw["successes"] == 0.0


def test_plan_covers_both_envs_with_each_algorithm():
    from tracerl.config import load_recipe

    from credit import ALGOS, plan

    for env in ("text_world", "workplace_db"):
        (sft_recipe, sft_overrides, sft), *runs = plan(env, list(ALGOS), [0, 1], Path("/tmp/bench"), ["rl.steps=2"])
        assert sft.name == ("sft" if env == "text_world" else "workplace_db-sft")
        s = load_recipe(sft_recipe, sft_overrides)
        assert s.env.train_tasks >= s.sft.demos  # the pool does not cap the SFT demonstrations
        assert len(runs) == 2 * len(ALGOS)
        for recipe, overrides, where in runs:
            r = load_recipe(recipe, overrides)
            # within an env every algorithm gets the same rollout budget (text_world 8 × 4, workplace_db 16 × 8)
            batch = (8, 4) if env == "text_world" else (16, 8)
            assert (r.env.name, r.rl.steps, r.rl.prompts_per_step, r.rl.group_size) == (env, 2, *batch)
            assert where.name == f"{'' if env == 'text_world' else env + '-'}{r.rl.algorithm.name}-s{r.run.seed}"
            assert r.model.path == f"{sft}/checkpoints/step_0"
            if r.rl.algorithm.name == "ppo":
                assert r.roles.critic.pretrain_steps == 2


def test_a_finished_run_under_other_settings_is_refused_not_reused(tmp_path):
    """A benchmark root reused for another attempt: the finished run there is reused only when its config.yaml
    matches what the overrides resolve to (run.dir aside); otherwise one sentence naming the first difference."""
    import json

    import pytest
    import yaml

    from credit import _finished
    from tracerl.config import load_recipe

    where = tmp_path / "run"
    where.mkdir()
    assert not _finished(where, "smoke", ["rl.truncation=keep"])  # nothing there yet
    there = load_recipe("smoke", [f"run.dir={tmp_path / 'elsewhere'}", "rl.truncation=keep"]).model_dump(mode="json")
    del there["faults"]  # a run from before a section existed: what it lacks is not compared
    (where / "config.yaml").write_text(yaml.safe_dump(there, sort_keys=False))
    (where / "summary.json").write_text(json.dumps({"wall_s": 1.0}))
    assert _finished(where, "smoke", [f"run.dir={where}", "rl.truncation=keep"])
    assert _finished(where)  # no settings given: finished is finished
    with pytest.raises(SystemExit, match=r"rl\.truncation: 'keep' there, 'penalize' here.*new --root"):
        _finished(where, "smoke", [f"run.dir={where}", "rl.truncation=penalize"])
