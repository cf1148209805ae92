"""No exception escapes a verifier on any policy output (hypothesis), and the answer checks that
used to be fooled: integers compared with a tolerance, hedged answers, a malformed \\sqrt."""

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tracerl.verifiers import ExactMatch, FormatCheck, JsonSchemaVerifier, MathEquivalence, NumericMatch

PIECES = list("0123456789+-*/^()[]{}.,=xy \\") + ["\\frac", "\\sqrt", "\\sqrt[", "\\text{", " or ", "\\pi",
                                                 "\\infty", "e", "!", "%", "\\boxed{", "\ud800", "\x00", "٣"]
MATHY = st.lists(st.sampled_from(PIECES), max_size=25).map("".join)
OUTPUT = st.one_of(st.text(max_size=200), MATHY.map(lambda s: f"<answer>{s}</answer>"),
                   st.builds(lambda a, b: f"{a}<answer>{b}", st.text(max_size=20), MATHY))


@pytest.fixture(scope="module")
def math_eq():
    with MathEquivalence(timeout_s=2.0) as m:
        yield m


def _sane(result, components):
    assert set(result.components) == set(components)
    assert all(0.0 <= v <= 1.0 for v in result.components.values())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(output=OUTPUT, reference=st.sampled_from(["1/2", "2x + 2", "73", "\\sqrt{2}", "0.5", "-3"]))
@example(output="<answer>\\sqrt[3{8}</answer>", reference="2")  # raised ValueError on main
def test_math_equivalence_never_raises(math_eq, output, reference):
    _sane(math_eq.verify({"answer": reference}, output), math_eq.components)


@settings(max_examples=300, deadline=None)
@given(output=OUTPUT)
def test_text_verifiers_never_raise(output):
    for verifier, task in ((ExactMatch(), {"answer": "Paris"}), (NumericMatch(), {"answer": "1234.5"}),
                           (FormatCheck(), {}), (JsonSchemaVerifier(), {"schema": {"type": "object"}})):
        _sane(verifier.verify(task, output), verifier.components)


def test_integers_compare_exactly(math_eq):
    # 123456789100 / 123456789012 - 1 = 7.1e-10, inside the 1e-9 relative tolerance for decimals
    assert not math_eq.equivalent("123456789100", "123456789012")
    assert math_eq.equivalent("123456789012", "123456789012")
    assert math_eq.equivalent("0.5", "1/2")


@pytest.mark.parametrize("hedge", ["2 \\text{ or } 3", "2 or 3", "6 \\text{ and } 7", "\\pm 6", "either 6"])
def test_hedged_answers_never_match(math_eq, hedge):
    # 2 * 3 = 6: "2 or 3" once became the product of the symbols o and r between 2 and 3
    assert not math_eq.equivalent(hedge, "6")


def test_an_unclosed_root_index_is_refused_not_raised(math_eq):
    result = math_eq.check("\\sqrt[3{8}", "2")
    assert not result.equal and result.path == "refused"
    assert math_eq.equivalent("\\sqrt[3]{8}", "2")
