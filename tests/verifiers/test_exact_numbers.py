"""Exact values are compared exactly: no relative tolerance turns a different integer, rational or
symbolic value into a match (round-2 attacks: `10^{30}+1` was `10^{30}`; a 7-digit answer off by
one was credited by NumericMatch's 1e-6 relative tolerance)."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracerl.verifiers import MathEquivalence, NumericMatch
from tracerl.verifiers.answers import numbers_match


@pytest.fixture(scope="module")
def math_eq():
    checker = MathEquivalence(timeout_s=2.0)
    yield checker
    checker.close()


def _numeric(answer, reference, **kw):
    return NumericMatch(**kw).verify({"answer": reference}, f"<answer>{answer}</answer>").components["correct"]


def test_seven_digit_answer_off_by_one_is_not_credited():
    # old: tolerance = 1e-6 * 1234567 = 1.23 >= |1234568 - 1234567| = 1, so it was credited
    assert _numeric("1234568", "1234567") == 0.0
    assert _numeric("1234568.0", "1234567") == 0.0  # integral values: exactly, whatever the spelling
    assert _numeric("1,234,567", "1234567") == 1.0
    # 1234567.4 is within 0.4 < 1/2 and < 1.23 of the integer: accepted; 1234567.5 is half way to
    # the next integer: refused although 0.5 < 1.23
    assert _numeric("1234567.4", "1234567") == 1.0
    assert _numeric("1234567.5", "1234567") == 0.0
    # genuine floats keep their tolerance: 1e-6 * 2.5 = 2.5e-6 >= 2e-6
    assert _numeric("2.500002", "2.5") == 1.0 and _numeric("2.500003", "2.5") == 0.0


def test_numbers_match_worked_by_hand():
    assert numbers_match(Fraction(10**30 + 1), Fraction(10**30), 1e-9) == (False, 0)
    ok, tol = numbers_match(Fraction(2001, 10), Fraction(200), 1e-2)  # 1e-2 * 200 = 2, held at 1/2
    assert ok and tol == Fraction(1, 2)
    ok, tol = numbers_match(Fraction(201), Fraction(4001, 20), 1e-2)  # ref 200.05: |201 - 200.05| = 0.95
    assert not ok


@settings(max_examples=200, deadline=None)
@given(st.integers(-10**40 + 1, 10**40 - 1), st.integers(-10**40 + 1, 10**40 - 1))
def test_numeric_different_integers_never_match(a, b):
    if abs(a) > 1e15 or abs(b) > 1e15:
        return  # max_abs refuses these anyway
    assert _numeric(str(a), str(b)) == float(a == b)
    assert _numeric(f"{a}.0", str(b)) == float(a == b)


@settings(max_examples=200, deadline=None)
@given(st.integers(-10**12, 10**12), st.integers(1, 10**6), st.floats(1e-12, 1e-1))
def test_no_tolerance_accepts_a_different_integer(ref, offset, rel_tol):
    assert not numbers_match(Fraction(ref + offset), Fraction(ref), rel_tol, 1e-9)[0]
    assert not numbers_match(Fraction(ref + offset), Fraction(2 * ref + 1, 2), rel_tol, 1e-9)[0] or offset == 0


@pytest.mark.parametrize("answer, reference", [
    ("10^{30}+1", "10^{30}"),                      # the round-2 case: relative difference 1e-30
    ("1000000000000000000000000000001", "10^{30}"),
    ("2^{100}+1", "2^{100}"),
    ("\\sqrt{10^{60}+1}", "10^{30}"),              # irrational, 5e-31 above the integer
    ("\\pi + 10^{-25}", "\\pi"),                   # symbolic constant plus a tiny exact term
    ("2x + 10^{-30}", "2x"),                       # a polynomial off by an exact tiny constant
    ("0.333333333333", "1/3"),                     # an exact rational reference is met exactly
    ("\\frac{1000000001}{1000000000}", "1"),
])
def test_exact_values_differing_by_a_tiny_amount_are_not_equal(math_eq, answer, reference):
    assert not math_eq.check(answer, reference).equal


@pytest.mark.parametrize("answer, reference", [
    ("10^{30}", "1000000000000000000000000000000"), ("\\sqrt{8}", "2\\sqrt{2}"), ("\\log(8)", "3\\log(2)"),
    ("\\frac{\\pi}{2}", "pi/2"), ("\\pi/2", "1.5707963267948966"),  # a decimal reference keeps its tolerance
    ("0.5", "\\frac{1}{2}"), ("10^{-3}", "0.001"),
])
def test_exactly_equal_forms_still_match(math_eq, answer, reference):
    assert math_eq.check(answer, reference).equal


@settings(max_examples=12, deadline=None)
@given(st.integers(12, 60), st.integers(1, 9))
def test_power_of_ten_plus_a_unit_is_never_the_power(math_eq, k, d):
    assert not math_eq.check(f"10^{{{k}}}+{d}", f"10^{{{k}}}").equal
    assert math_eq.check(f"10^{{{k}}}+{d}", f"{d}+10^{{{k}}}").equal


@settings(max_examples=200, deadline=None)
@given(st.integers(-10**30, 10**30), st.integers(-10**30, 10**30))
def test_math_equivalence_plain_integers_equal_iff_equal(math_eq, a, b):
    assert math_eq.check(str(a), str(b)).equal == (a == b)  # the in-process number path
