"""benchmarks/distill.py: steps-to-target read off hand-made evaluation curves and run directories."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from distill import collect, curve, first_at, table  # noqa: E402


def _run(d: Path, evals: dict[int, float], last: int, final: float, finished: bool = True) -> None:
    d.mkdir(parents=True)
    lines = [{"stage": "rl", "step": s, "reward/mean": 0.0} | ({"eval/success": evals[s]} if s in evals else {})
             for s in range(1, last + 1)]
    (d / "metrics.jsonl").write_text("\n".join(json.dumps(m) for m in lines))
    summary = {"evals": [{"after": "rl", "step": last, "eval/success": final}]} | ({"wall_s": 1.0} if finished else {})
    (d / "summary.json").write_text(json.dumps(summary))


def _eval(d: Path, success: float) -> None:
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"evals": [{"after": "base", "step": 0, "eval/success": success}],
                                                "wall_s": 1.0}))


def test_steps_to_target_by_hand(tmp_path):
    sd = tmp_path / "seed0"
    _eval(sd / "teacher-eval", 0.40)
    _eval(sd / "start-eval", 0.20)
    _run(sd / "grpo", {3: 0.30, 6: 0.35, 9: 0.37}, 10, 0.36)  # target 0.9 × 0.40 = 0.36: first reached at step 9
    _run(sd / "mopd", {3: 0.33, 6: 0.361}, 6, 0.361)         # 0.361 ≥ 0.36 first at step 6
    _run(sd / "mopd_mask", {3: 0.50}, 3, 0.5, finished=False)  # stopped after step 3: shown, marked
    assert curve(sd / "mopd") == [(3, 0.33), (6, 0.361)]
    assert first_at([(0, 0.5), (3, 0.1)], 0.4) is None  # the start does not count
    res = collect(tmp_path, 0.9)
    r = res[0]
    assert abs(r["target"] - 0.36) < 1e-12 and r["start"] == 0.20
    assert r["mopd"]["steps_to_target"] == 6 and r["grpo"]["steps_to_target"] == 9
    assert r["mopd_mask"]["steps_to_target"] == 3 and not r["mopd_mask"]["finished"]
    text = table(res, 0.9)
    assert "0:0.200 3:0.300 6:0.350 9:0.370 10:0.360" in text and "3 (to 3)" in text and "(unfinished)" in text
    assert "mopd_mask: mean" not in text and "grpo: mean held-out at its last step 0.360" in text


def test_the_grpo_row_trains_grpo_under_any_recipe():
    from distill import ALGOS

    from tracerl.config import load_recipe

    default = load_recipe("default", [])
    assert load_recipe("default", ALGOS["grpo"]).rl == default.rl  # the default recipe's own settings: replays hold
    under_mopd = load_recipe("mopd", ALGOS["grpo"])
    assert under_mopd.rl.algorithm.name == "grpo" and under_mopd.rl.truncation == "mask"
    assert not under_mopd.roles.teachers


def test_tagged_variants_are_rows_of_their_own(tmp_path):
    sd = tmp_path / "seed0"
    _eval(sd / "teacher-eval", 0.50)
    _eval(sd / "start-eval", 0.10)
    _run(sd / "grpo", {3: 0.20}, 6, 0.30)
    _run(sd / "mopd_forward@mb8", {3: 0.46}, 6, 0.48)  # target 0.45: first reached at step 3
    _run(sd / "mopd_forward", {3: 0.40}, 6, 0.44)      # the untagged row never reaches it
    (sd / "notes").mkdir()                              # a directory that is no row is left out
    _run(sd / "mopd@mb8.unfinished", {3: 0.9}, 3, 0.9)  # a killed run moved aside is no row either
    res = collect(tmp_path, 0.9)
    assert sorted(k for k in res[0] if k not in ("teacher", "start", "target")) == ["grpo", "mopd_forward",
                                                                                     "mopd_forward@mb8"]
    assert res[0]["mopd_forward@mb8"]["steps_to_target"] == 3 and res[0]["mopd_forward"]["steps_to_target"] is None
    assert res[0]["grpo"]["steps_to_target"] is None
    text = table(res, 0.9)
    assert "seed 0 mopd_forward@mb8 0:0.100 3:0.460 6:0.480" in text
    assert text.index("mopd_forward ") < text.index("mopd_forward@mb8")  # each algorithm, then its variants
