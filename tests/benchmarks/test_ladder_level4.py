"""Level 4 of the ladder (benchmarks/ladder_levels/level4.py): its per-method measures and gate on hand-made
rows, the truncation rate, and the replay verifier on a real workplace_db task."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

from ladder_levels import gates as G, level4  # noqa: E402


def row(algo, seed, start, after, *, inv=(0.01, 0.015), rep=(0.0, 0.0), trunc=(0.0, 0.0), steps=10000.0, dis=0.0):
    return {"algo": algo, "seed": seed, "start": start, "success": after, "start_invalid": inv[0], "invalid_rate": inv[1],
            "start_repeat": rep[0], "repeat_rate": rep[1], "start_trunc": trunc[0], "trunc": trunc[1],
            "env_steps": steps, "per_kstep": 0.0, "per_hour": 0.0, "v2": {"disagreement": dis}}


def rows(prime_steps=8600.0, **grpo):
    # grpo gains +0.05, +0.01, +0.03 (mean 0.03, worst 0.01); ppo -0.10, +0.05, 0.00 (mean -0.0167);
    # prime -0.2 each; gigpo -0.05 each: grpo is the best method
    out = [row("grpo", 0, 0.20, 0.25, **grpo), row("grpo", 1, 0.25, 0.26, **grpo), row("grpo", 2, 0.18, 0.21, **grpo)]
    out += [row("ppo", s, 0.2, 0.2 + g, steps=9000.0) for s, g in enumerate([-0.10, 0.05, 0.0])]
    out += [row("prime", s, 0.2, 0.0, steps=prime_steps) for s in range(3)]
    out += [row("gigpo", s, 0.2, 0.15) for s in range(3)]
    return out


@pytest.fixture(scope="module")
def gates():
    return G.load()[0]


def test_the_gate_file_declares_every_level4_threshold(gates):
    for k in ["seeds_min", "heldout_gain_min", "heldout_gain_worst_min", "invalid_increase_max", "loop_increase_max",
              "truncation_increase_max", "env_steps_ratio_max", "v2_disagreement_max"]:
        G.threshold(gates, "level4", k)


def test_per_method_means_and_the_best_method_by_hand():
    m = level4.per_method(rows())
    assert m["grpo"]["gain_mean"] == pytest.approx(0.03) and m["grpo"]["gain_worst"] == pytest.approx(0.01)
    assert m["ppo"]["gain_mean"] == pytest.approx(-0.05 / 3)
    assert m["grpo"]["invalid_up"] == pytest.approx(0.005)  # 0.015 - 0.010 at every seed
    assert level4.best_method(rows()) == "grpo"


def test_the_gate_passes_when_the_best_method_gains_without_more_invalid_loops_or_truncation(gates):
    checks = level4.checks({"rows": rows()}, gates)
    # env steps: grpo 10000 / mean(10000, 9000, 8600, 10000) = 10000 / 9400 = 1.0638 <= 1.10
    ratio = next(c for c in checks if "env steps" in c.name)
    assert ratio.observed == pytest.approx(10000 / 9400)
    assert G.verdict(checks) == "PASS", G.report(4, checks)


@pytest.mark.parametrize("change, failing", [
    ({"prime_steps": 7000.0}, "env steps"),          # 10000 / mean(10000, 9000, 7000, 10000) = 1.111 > 1.10
    ({"trunc": (0.0, 0.02)}, "truncated"),           # +0.02 truncated episodes > 0.01
    ({"inv": (0.01, 0.03)}, "invalid"),              # +0.02 invalid per turn > 0.01
    ({"rep": (0.0, 0.011)}, "repeated"),             # +0.011 loops per turn > 0.01
])
def test_one_clause_fails_the_level(gates, change, failing):
    checks = level4.checks({"rows": rows(**change)}, gates)
    assert [c.name for c in checks if not c.passed] == [c.name for c in checks if failing in c.name]
    assert G.verdict(checks) == "FAIL"


def test_a_small_mean_gain_a_bad_seed_a_missing_seed_or_replay_disagreement_fails(gates):
    r = rows()
    r[1]["success"] = 0.22  # grpo gains +0.05, -0.03, +0.03: mean 0.0167 < 0.02, worst -0.03 < -0.02
    failed = [c.name for c in level4.checks({"rows": r}, gates) if not c.passed]
    assert len(failed) == 2 and "mean over seeds" in failed[0] and "worst seed" in failed[1]
    r = [x for x in rows() if not (x["algo"] == "prime" and x["seed"] == 2)]
    assert not level4.checks({"rows": r}, gates)[0].passed  # prime at 2 seeds < 3
    r = rows()
    r[5]["v2"]["disagreement"] = 0.0125  # 5 of 400 episodes, > 0.01
    assert [c.passed for c in level4.checks({"rows": r}, gates)][-1] is False
    assert G.verdict(level4.checks({"rows": []}, gates)) == "FAIL"


def test_disagreement_counts_an_unrebuildable_task_as_a_disagreement():
    d = level4.disagreement([1.0, 0.0, 1.0, 0.0], [1.0, 1.0, None, 0.0])
    assert d["disagree"] == 2 and d["disagreement"] == 0.5 and d["replay_success"] == 0.5  # (1 + 1 + 0 + 0) / 4


def test_truncation_rate_counts_budget_cutoffs_only():
    ts = [SimpleNamespace(terminal_reason=r, truncated=r in ("max_turns", "max_tokens"))
          for r in ("eos", "max_turns", "env_failure", "max_tokens")]
    assert level4.truncation_rate(ts) == 0.5


def _traj(actions, reason="eos"):
    """A stored episode whose 'token ids' are characters, decoded by joining them."""
    ids, spans = [], []
    for a in actions:
        spans.append(SimpleNamespace(kind="action", start=len(ids), end=len(ids) + len(a)))
        ids += list(a)
    return SimpleNamespace(token_ids=ids, spans=spans, terminal_reason=reason, reset_seed=0)


def test_replay_rescores_the_reference_calls_as_success_and_shortcuts_as_failure():
    from tracerl.envs.workplace_db import SPEC as spec  # only this env (get_env would import every built-in one)

    task = spec.generate("train", 1, seed=5, difficulty=2 / 3)[0]
    calls = [f"<call> {c}</call>" for c in task.metadata["script"]]  # the reference calls, ending in done
    decode = "".join
    assert level4.replay_success(_traj(calls), task, spec, decode) == 1.0
    assert level4.replay_success(_traj(["<call> done</call>"]), task, spec, decode) == 0.0
    # the last action was cut at the token budget, so the env never saw `done`: no success
    assert level4.replay_success(_traj(calls, reason="max_tokens"), task, spec, decode) == 0.0
    # not ended by the env (turn budget): no success
    assert level4.replay_success(_traj(calls[:-1], reason="max_turns"), task, spec, decode) == 0.0
