"""Math equivalence: right answers in many forms, and inputs built to hang or fool the checker."""

import time

import pytest

from tracerl.verifiers import MathEquivalence
from tracerl.verifiers.mathexpr import ExprError, to_python


@pytest.fixture(scope="module")
def math_eq():
    checker = MathEquivalence(timeout_s=1.0)
    yield checker
    checker.close()


@pytest.mark.parametrize("answer, reference", [
    ("0.5", "\\frac{1}{2}"), ("50%", "1/2"), ("2(x+1)", "2x + 2"), ("\\sqrt{8}", "2\\sqrt{2}"),
    ("\\frac{\\pi}{2}", "pi/2"), ("x = 3", "3"), ("(x+1)^2", "x^2 + 2x + 1"), ("\\sqrt[3]{27}", "3"),
    ("1/\\sqrt{2}", "\\frac{\\sqrt{2}}{2}"), ("(1, 2)", "(1, 2)"), ("e^{0}", "1"), ("\\frac12", "0.5"),
    ("2\\times10^{3}", "2000"), ("5\\text{ cm}", "5"), ("\\$5", "5"), ("10^{-3}", "0.001"),
    ("\\dfrac{\\sqrt{3}}{2}", "\\sin(\\pi/3)"), ("\\pi r^2", "r^2\\pi"),
])
def test_equivalent_forms_are_accepted(math_eq, answer, reference):
    assert math_eq.check(answer, reference).equal


@pytest.mark.parametrize("answer, reference", [
    ("0.333333", "1/3"), ("x", "1/2"), ("2x + 1", "2x + 2"), ("(2, 1)", "(1, 2)"), ("\\infty", "5"),
    ("0/0", "0"), ("nan", "1"),
])
def test_different_values_are_rejected(math_eq, answer, reference):
    assert not math_eq.check(answer, reference).equal


@pytest.mark.parametrize("answer", [
    "9^{9^{9^{9}}}", "2^{2^{2^{2^{2}}}}", "(10^{100})^{100}", "2^{100000000}", "factorial(100000)",
    "1" * 500, "(1+" * 100 + "1" + ")" * 100, "__import__('os').system('id')", "x.__class__", "[1]*10**9",
    "lambda: 1", "'a' * 10**9",
])
def test_pathological_or_code_answers_are_refused_fast(math_eq, answer):
    """Attack: power towers, huge exponents/factorials, giant literals, deep nesting and code,
    all of which can hang or exploit a checker that hands text to sympy. Refused in microseconds."""
    t0 = time.perf_counter()
    result = math_eq.check(answer, "1")
    assert not result.equal and result.path in ("refused", "number")
    assert time.perf_counter() - t0 < 0.05


def test_a_slow_expression_is_killed_at_its_deadline_and_the_pool_recovers():
    """Attack: an expression that passes every static check but makes sympy expand a huge
    polynomial. The worker is killed at the deadline; the next check still works."""
    with MathEquivalence(timeout_s=0.5) as checker:
        assert checker.equivalent("(x+1)^2", "x^2+2x+1")  # starts the worker outside the timing
        t0 = time.perf_counter()
        slow = checker.check("(a+b+c+d+f+g+h+1)^{400}", "(a+b+c+d+f+g+h+2)^{400}")
        took = time.perf_counter() - t0
        assert not slow.equal and slow.path == "deadline" and took < 0.8
        assert checker.check("2(x+1)", "2x+2").equal  # a fresh worker answers
        assert checker.stats["restarts"] == 1


def test_unsafe_syntax_never_reaches_the_parser():
    for text in ("x.__class__", "a[0]", "f(x=1)", "lambda: 0", "'s'"):
        with pytest.raises(ExprError):
            to_python(text)
    assert to_python("2x") == "2 * x" and to_python("\\frac{1}{2}") == "( ( 1 ) / ( 2 ) )"


def test_verify_reports_components_and_reason(math_eq):
    r = math_eq.verify({"answer": "\\frac{1}{2}"}, "I get <answer>9^{9^9}</answer>")
    assert r.components == {"correct": 0.0, "format": 1.0} and "power tower" in r.reason
    r = math_eq.verify({"answer": "\\frac{1}{2}"}, "It is 0.5")
    assert r.components == {"correct": 0.0, "format": 0.0} and "outside the tags" in r.reason
