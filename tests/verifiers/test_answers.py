"""Answer extraction, exact match and numeric match, including the numeric attacks."""

from fractions import Fraction

import pytest

from tracerl.verifiers import ExactMatch, NumericMatch, extract_answer, extract_code, normalize_text, parse_number


@pytest.mark.parametrize("text, value", [
    ("<answer>42</answer>", "42"),
    ("thinking...\n<answer>\n  x = 3 \n</answer>\n", "x = 3"),
])
def test_single_answer_block_is_extracted(text, value):
    assert extract_answer(text).value == value


@pytest.mark.parametrize("text, why", [
    ("The answer is 42.", "outside the tags"),
    ("<answer>41</answer> <answer>42</answer>", "exactly one"),
    ("<answer>42", "malformed"),
    ("<answer></answer>", "empty"),
    ("<answer>" + "9" * 3000 + "</answer>", "characters"),
])
def test_answers_outside_or_around_the_rules_are_not_graded(text, why):
    got = extract_answer(text)
    assert got.value is None and why in got.reason


def test_code_extraction_prefers_the_last_fenced_block():
    text = "```python\nprint(1)\n```\nbetter:\n```python\nprint(2)\n```"
    assert extract_code(text).value == "print(2)"
    assert extract_code("<code>x = 1</code>").value == "x = 1"
    assert extract_code("just prose").value is None


@pytest.mark.parametrize("raw, norm", [(" $\\boxed{Paris}$. ", "paris"), ("\\text{New   York}", "new york")])
def test_normalization(raw, norm):
    assert normalize_text(raw) == norm


@pytest.mark.parametrize("text, value", [
    ("42", Fraction(42)), ("-3.5", Fraction(-7, 2)), ("1,234.5", Fraction(2469, 2)),
    ("2.5e3", Fraction(2500)), ("3/4", Fraction(3, 4)), ("\\frac{3}{4}", Fraction(3, 4)),
    ("-\\dfrac{1}{8}", Fraction(-1, 8)), ("12.5%", Fraction(1, 8)), (".5", Fraction(1, 2)),
])
def test_numbers_parse_exactly(text, value):
    # e.g. "12.5%" is 12.5 / 100 = 1/8 exactly; "1,234.5" is 2469/2
    assert parse_number(text) == (value, "")


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-Infinity", "\\infty", "1/0", "1e999", "9" * 60, "1 2", "0x10", "2**3"])
def test_non_finite_huge_or_non_numbers_are_refused(text):
    value, reason = parse_number(text)
    assert value is None and reason


def test_exact_match_accepts_any_listed_answer():
    v = ExactMatch()
    assert v.verify({"answer": ["NYC", "New York"]}, "<answer>new york</answer>").components == {"correct": 1.0, "format": 1.0}
    r = v.verify({"answer": "Paris"}, "<answer>Lyon</answer>")
    assert r.components["correct"] == 0.0 and "not one of" in r.reason


@pytest.mark.parametrize("answer", ["nan", "inf", "-inf", "1e308", "1e999", "99999999999999999999999999", "1234.5 and 1234"])
def test_numeric_attacks_are_not_rewarded(answer):
    """Attack: NaN (compares false, so `not diff > tol` passes), infinity, huge values that swamp a
    relative tolerance, or two numbers at once."""
    r = NumericMatch().verify({"answer": "1234.5"}, f"<answer>{answer}</answer>")
    assert r.components["correct"] == 0.0 and r.reason


def test_numeric_tolerance_worked_by_hand():
    v = NumericMatch(rel_tol=1e-3, abs_tol=0.0)
    # reference 200: tolerance = 1e-3 * 200 = 0.2, so 200.19 passes and 200.21 does not
    assert v.verify({"answer": 200}, "<answer>200.19</answer>").components["correct"] == 1.0
    assert v.verify({"answer": 200}, "<answer>200.21</answer>").components["correct"] == 0.0


def test_trajectory_objects_are_duck_typed():
    class Traj:
        action_text = "<answer>7</answer>"

    assert NumericMatch().verify({"answer": "7"}, Traj()).components["correct"] == 1.0
    assert NumericMatch().verify({"answer": "7"}, {"text": "<answer>7</answer>"}).components["correct"] == 1.0
    with pytest.raises(TypeError, match="action_text"):
        NumericMatch().verify({"answer": "7"}, 7)
