"""benchmarks/ladder.py's harness: the predeclared gate file, PASS/FAIL on hand-made numbers, the
2^(5-1) design's balance and orthogonality, and the independent math_tool verifier."""

import itertools
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

from ladder_levels import design, gates as G, level2, verifier2  # noqa: E402


def test_the_shipped_gate_file_declares_every_threshold_the_levels_read():
    gates, digest = G.load()
    assert len(digest) == 64
    for level, keys in {"level0": ["passed_min", "failed_max"],
                        "level2": ["seeds_min", "heldout_gain_min", "entropy", "length", "v2_gain_min", "v2_disagreement_max"],
                        "level5": ["quality_frac", "wall_ratio_max", "kl_max", "is_weight_max", "ess_frac_min"],
                        "level6": ["regress_tol", "share_tol", "frozen_protocol_min"]}.items():
        for k in keys:
            G.threshold(gates, level, k)


@pytest.mark.parametrize("text, needle", [("level2: [1, 2]\n", "must map level names"),
                                          ("level2: {entropy: [3, 1]}\n", "min <= max"),
                                          ("level2: {entropy: yes}\n", "a number or"),
                                          ("level2: {x: 1}\n", "has no level2.entropy"),
                                          ("level2: {a: [1\n", "not valid YAML")])
def test_a_bad_gate_file_is_one_sentence_naming_the_problem(tmp_path, text, needle):
    p = tmp_path / "g.yaml"
    p.write_text(text)
    with pytest.raises(G.GateFileError, match=needle.replace("[", r"\[")):
        gates, _ = G.load(p)
        G.threshold(gates, "level2", "entropy")


def test_checks_are_inclusive_and_an_unmeasured_number_fails():
    assert G.at_least("g", 0.005, 0.005).passed and not G.at_least("g", 0.0049, 0.005).passed
    assert G.at_most("d", 0.02, 0.02).passed and not G.at_most("d", 0.021, 0.02).passed
    assert G.within("e", 3.0, [0.05, 3.0]).passed and not G.within("e", 0.04, [0.05, 3.0]).passed
    assert not G.at_least("g", None, 0).passed and not G.at_least("g", float("nan"), 0).passed
    assert G.verdict([G.at_least("a", 1, 0), G.at_most("b", 1, 2)]) == "PASS"
    assert G.verdict([G.at_least("a", 1, 0), G.at_most("b", 3, 2)]) == "FAIL"
    assert G.verdict([]) == "FAIL"  # a gate with no clause never passes


def test_the_half_fraction_is_balanced_orthogonal_resolution_v_and_holds_the_default():
    rows = design.half_fraction(5)
    assert len(rows) == 16 and len(set(rows)) == 16
    cols = list(zip(*rows))
    assert all(sum(c) == 0 for c in cols)  # balance: 8 runs at each level of every factor
    two_fi = [tuple(a * b for a, b in zip(cols[i], cols[j])) for i, j in itertools.combinations(range(5), 2)]
    for u, v in itertools.combinations(cols + two_fi, 2):  # mains and 2-factor interactions all orthogonal
        assert sum(a * b for a, b in zip(u, v)) == 0
    assert all(r[4] == -r[0] * r[1] * r[2] * r[3] for r in rows)  # I = -ABCDE
    name, coded, overrides = design.cells()[0]
    assert coded == (-1,) * 5 and "rl.truncation=mask" in overrides and "tasks.sampler.kind=uniform" in overrides
    assert len({c[0] for c in design.cells()}) == 16


def test_main_effects_recover_hand_made_coefficients():
    rows = design.half_fraction(5)
    y = [0.5 + 0.1 * r[0] - 0.03 * r[3] for r in rows]  # +0.2 and -0.06 between levels
    eff = design.main_effects(rows, y)
    assert eff["aggregation"] == pytest.approx(0.2) and eff["truncation"] == pytest.approx(-0.06)
    assert eff["std_scaling"] == pytest.approx(0) and eff["sampling"] == pytest.approx(0)


def test_the_independent_verifier_reads_problems_and_answers_by_hand():
    p = "Bo has 7 coins. Bo gets 3 bags of 4. Bo gives away 5. The coins are multiplied by 2. How many coins does Bo have?"
    assert verifier2.solve(p) == (7 + 12 - 5) * 2 == 28
    assert verifier2.solve("Bo has some coins.") is None
    assert verifier2.final_answer("<code>x</code><output>1</output><answer>3</answer><answer> 28 </answer>") == 28
    assert verifier2.rescore(p, "<answer>28</answer>", "eos") == 1.0
    assert verifier2.rescore(p, "<answer>28</answer>", "max_tokens") == 0.0  # cut off: never a success
    assert verifier2.rescore(p, "<answer>28", "eos") == 0.0  # unclosed


def _results(gain: float, seeds=(0, 1, 2), disagree=0.0, entropy=(0.5, 1.0)):
    cells = [{"cell": n, "coded": list(c), "seed": s, "success": 0.2 + gain, "entropy_min": entropy[0],
              "entropy_max": entropy[1], "length_min": 10.0, "length_max": 20.0,
              "v2": {"v2_success": 0.2 + gain, "disagreement": disagree}}
             for s in seeds for n, c, _ in design.cells()]
    return {"cells": cells, "sft": {"success": 0.2, "v2": {"v2_success": 0.2}}}


def test_level2_gate_on_hand_made_numbers():
    gates = {"level2": {"seeds_min": 3, "heldout_gain_min": 0.005, "entropy": [0.05, 3.0], "length": [3, 80],
                        "v2_gain_min": 0.005, "v2_disagreement_max": 0.02}}
    assert G.verdict(level2.checks(_results(0.01), gates)) == "PASS"
    assert G.verdict(level2.checks(_results(0.0), gates)) == "FAIL"  # no rise
    assert G.verdict(level2.checks(_results(0.01, seeds=(0, 1)), gates)) == "FAIL"  # two seeds
    assert G.verdict(level2.checks(_results(0.01, disagree=0.05), gates)) == "FAIL"
    assert G.verdict(level2.checks(_results(0.01, entropy=(0.01, 1.0)), gates)) == "FAIL"  # entropy collapse
    one_bad = _results(0.01)
    for c in one_bad["cells"]:
        if c["seed"] == 2:
            c["success"] = 0.19
    assert G.verdict(level2.checks(one_bad, gates)) == "FAIL"  # the worst seed decides


def test_a_result_is_bound_to_its_own_levels_thresholds_not_to_the_whole_file():
    a = {"level2": {"entropy": [0.05, 3.0]}, "level5": {"kl_max": 0.05}}
    b = {**a, "level1": {"format_validity_min": 0.9}}            # another level declared later
    c = {**a, "level5": {"kl_max": 0.06}}                        # this level's threshold moved
    assert G.section_digest(a, "level5") == G.section_digest(b, "level5")
    assert G.section_digest(a, "level5") != G.section_digest(c, "level5")
    assert G.section_digest(a, "level2") == G.section_digest(c, "level2")


def test_level5_has_no_quality_target_when_sync_does_not_rise():
    from ladder_levels import level5

    gates = {"level5": {"quality_frac": 1.0, "wall_ratio_max": 1.0, "kl_max": 0.05, "is_weight_max": 5.0,
                        "ess_frac_min": 0.5, "v2_disagreement_max": 0.02}}

    def run(label, curve):
        return {"label": label, "seed": 0, "curve": curve, "start": curve[0][1], "v2": {"disagreement": 0.0},
                "kl_max": 0.01, "is_p99_max": 1.0, "ess_frac_min": 0.9}

    rising = {"runs": [run("sync", [[0, 0.30], [50, 0.35], [100, 0.40]]),
                       run("async-eta1", [[0, 0.30], [30, 0.41], [60, 0.42]])]}
    wall = level5.checks(rising, gates)[0]
    # target 0.40: async crosses it at 30 * 0.10 / 0.11 = 27.27 s (linear between evaluations), sync at 100 s
    assert wall.passed and abs(wall.observed - 30 * 0.10 / 0.11 / 100) < 1e-6
    falling = {"runs": [run("sync", [[0, 0.30], [50, 0.31], [100, 0.29]]),
                        run("async-eta1", [[0, 0.30], [30, 0.35], [60, 0.33]])]}
    wall = level5.checks(falling, gates)[0]
    assert not wall.passed and wall.observed is None and "not above its start" in wall.note
