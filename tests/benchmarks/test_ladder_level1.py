"""Level 1's measures (benchmarks/ladder_levels/level1.py) on hand-made turns and episodes, and its gate on
hand-made numbers: no model, no run."""

import math
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

from ladder_levels import gates as G, level1 as L  # noqa: E402
from tracerl.envs.math_tool.native import MathToolNativeEnv  # noqa: E402
from tracerl.envs.native_tools import get_parser  # noqa: E402

PARSER = get_parser("hermes")
SCHEMAS = MathToolNativeEnv().native_tools.schemas
CALL = '<tool_call>\n{"name": "python", "arguments": {"code": "print(3+4)"}}\n</tool_call>'


@pytest.mark.parametrize("text, valid, attempt, call_ok, copied", [
    (CALL, True, True, True, False),                                   # exactly a schema-valid call
    ("Let me compute. " + CALL, False, True, True, False),             # a valid call, but not only the call
    (CALL.replace('"python"', '"python2"'), False, True, False, False),  # no such tool
    (CALL.replace('"code"', '"src"'), False, True, False, False),      # undeclared argument, required one missing
    (CALL.replace('"print(3+4)"', "3"), False, True, False, False),    # code must be a string
    ('<tool_call>\n{"name": "python", "arguments": {"code": "x"', False, True, False, False),  # never closed
    ("7", True, False, False, False),                                  # the final answer: the integer alone
    (" -12 ", True, False, False, False),
    ("7 apples", False, False, False, False),                          # an answer, not in the exact format
    ("<tool_response>\n7", False, False, False, True),                 # writes the tool's markup itself
    ("Result: 7", False, False, False, True),                          # the raw variant's observation line
])
def test_a_turn_is_classified_by_the_parser_and_the_tools_schema(text, valid, attempt, call_ok, copied):
    c = L.classify_turn(text, PARSER, SCHEMAS, L.RAW_MARKUP)
    assert (c["valid"], c["attempt"], c["call_ok"], c["copied"]) == (valid, attempt, call_ok, copied)
    assert c["answer"] == (not attempt)


def test_ece_and_brier_by_hand():
    # bins of width 0.1: {0.05 -> y 0}, {0.15 -> y 1}, {0.95, 0.95 -> y 1, 0}
    # ECE = 1/4*|0-0.05| + 1/4*|1-0.15| + 2/4*|0.5-0.95| = 0.0125 + 0.2125 + 0.225 = 0.45
    # Brier = (0.05^2 + 0.85^2 + 0.05^2 + 0.95^2) / 4 = (0.0025 + 0.7225 + 0.0025 + 0.9025) / 4 = 0.4075
    conf, y = [0.05, 0.15, 0.95, 0.95], [0, 1, 1, 0]
    assert L.ece(conf, y) == pytest.approx(0.45)
    assert L.brier(conf, y) == pytest.approx(0.4075)
    assert L.ece([1.0, 1.0], [1, 1]) == 0.0  # confidence 1 lands in the last bin, perfectly calibrated
    assert L.ece([0.3] * 10, [1] * 3 + [0] * 7) == pytest.approx(0.0)
    assert math.isnan(L.ece([], []))


def test_measures_of_three_hand_made_episodes():
    episodes = [
        {"task_id": "a", "correct": 1.0, "turns": [{"text": CALL, "tokens": 10, "logprob": -1.0},
                                                   {"text": "7", "tokens": 2, "logprob": math.log(0.5)}]},
        {"task_id": "b", "correct": 0.0, "turns": [{"text": CALL.replace('"print(3+4)"', "3"), "tokens": 8, "logprob": -2.0},
                                                   {"text": "<tool_response>\n5", "tokens": 4, "logprob": math.log(0.25)}]},
        {"task_id": "c", "correct": 0.0, "turns": [{"text": "12 apples", "tokens": 4, "logprob": math.log(0.8)}]},
    ]
    m = L.measures(episodes, PARSER, SCHEMAS)
    assert m["turns"] == 5 and m["episodes"] == 3
    assert m["format_validity"] == pytest.approx(2 / 5)        # the exact call and "7"
    assert m["success"] == pytest.approx(1 / 3)
    assert m["tokens_per_episode"] == pytest.approx(28 / 3)    # 10+2+8+4+4
    assert m["tokens_per_turn"] == pytest.approx(28 / 5)
    assert m["call_attempts"] == 2 and m["tool_call_validity"] == pytest.approx(1 / 2)
    assert m["copied_observation"] == pytest.approx(1 / 5)
    # confidences: the last turn is an answer in each: 0.5, 0.25, 0.8 against outcomes 1, 0, 0
    assert m["brier"] == pytest.approx((0.25 + 0.0625 + 0.64) / 3)
    assert m["ece"] == pytest.approx((0.5 + 0.25 + 0.8) / 3)   # each in its own bin


def test_result_lines_are_markup_only_in_the_raw_variants_prompt():
    prose = "Result equals 26. Result: 26"  # the template variant's prose may say it; only raw shows results so
    assert not L.classify_turn(prose, PARSER, SCHEMAS)["copied"]
    assert L.classify_turn(prose, PARSER, SCHEMAS, L.RAW_MARKUP)["copied"]


def test_an_episode_that_ends_on_a_call_has_confidence_zero():
    ep = {"task_id": "a", "correct": 0.0, "turns": [{"text": CALL, "tokens": 5, "logprob": -0.1}]}
    assert L.confidence(ep, PARSER, SCHEMAS) == 0.0
    assert L.measures([ep], PARSER, SCHEMAS)["brier"] == 0.0


def test_contamination_overlap_exact_and_with_numbers_masked():
    held = ["Kim has 24 apples. How many apples does Kim have?", "Bo has 3 pens. How many pens does Bo have?"]
    demos = ["kim has 24 apples   how many apples does kim have", "Bo has 9 pens. How many pens does Bo have?"]
    assert L.overlap(held, demos) == 0.5                  # the first is a demo up to case and punctuation
    assert L.overlap(held, demos, numbers=False) == 1.0   # the second shares its template, not its numbers
    assert L.overlap(held, []) == 0.0


def test_fresh_numbers_change_every_number_and_keep_its_digits():
    text = "Kim has 24 apples. Kim gets 7 bags of 130."
    out = L.fresh_numbers(text, random.Random(0))
    import re
    old, new = re.findall(r"\d+", text), re.findall(r"\d+", out)
    assert [len(x) for x in old] == [len(x) for x in new] and all(a != b for a, b in zip(old, new))
    assert re.sub(r"\d+", "#", text) == re.sub(r"\d+", "#", out)


def _results(sft_success=0.5, copied=0.0, contamination=0.0):
    v = lambda s, c=0.0: {"success": s, "format_validity": 0.95, "tool_call_validity": 0.92,  # noqa: E731
                           "call_attempts": 50, "copied_observation": c}
    return {"variants": {"raw": v(0.02), "template": v(0.10), "sft": v(sft_success, copied)},
            "contamination": {"exact": contamination}}


def test_level1_gate_on_hand_made_numbers():
    gates, _ = G.load()
    for k in ("format_validity_min", "tool_call_validity_min", "success_gain_min", "copied_observation_max",
              "contamination_max"):
        G.threshold(gates, "level1", k)
    ok = L.checks(_results(), gates)
    assert G.verdict(ok) == "PASS" and ok[2].observed == pytest.approx(0.5 - 0.10)  # gain over the better baseline
    assert G.verdict(L.checks(_results(sft_success=0.14), gates)) == "FAIL"        # gain 0.04 < 0.05
    assert G.verdict(L.checks(_results(copied=0.02), gates)) == "FAIL"
    assert G.verdict(L.checks(_results(contamination=0.01), gates)) == "FAIL"
    missing = _results()
    del missing["variants"]["raw"]
    assert G.verdict(L.checks(missing, gates)) == "FAIL"   # a baseline not measured is no gain
