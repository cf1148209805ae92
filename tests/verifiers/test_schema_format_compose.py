"""JSON schema, format checks and reward composition."""

import math

import pytest

from tracerl.verifiers import FormatCheck, JsonSchemaVerifier, RewardComposer, RewardError, VerifierResult, parse_strict_json

SCHEMA = {"schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
                     "additionalProperties": False}}


@pytest.mark.parametrize("doc, why", [
    ('{"n": NaN}', "not JSON"), ('{"n": 1e999}', "infinity"), ('{"n": 1, "n": 2}', "duplicate"),
    ('{"n": 1} {"n": 2}', "single JSON"), ("[" * 3000 + "]" * 3000, "nested"),
])
def test_strict_json_refusals(doc, why):
    """Attack: non-standard numbers, duplicate keys read differently by two parsers, two
    documents, nesting that overflows a recursive parser."""
    with pytest.raises(ValueError, match=why):
        parse_strict_json(doc)


def test_schema_verdicts():
    v = JsonSchemaVerifier()
    assert v.verify(SCHEMA, '<answer>{"n": 3}</answer>').components == {"valid": 1.0, "format": 1.0}
    bad = v.verify(SCHEMA, '<answer>{"n": "3"}</answer>')
    assert bad.components == {"valid": 0.0, "format": 1.0} and "schema violation at n" in bad.reason
    assert v.verify(SCHEMA, '{"n": 3}').components["valid"] == 0.0  # outside the tags


def test_format_check():
    f = FormatCheck()
    assert f.verify({}, "<think>a</think><answer>1</answer>").components == {"format": 1.0}
    assert "after </answer>" in f.verify({}, "<answer>1</answer> or 2").reason
    assert "not closed" in f.verify({}, "<think>a <answer>1</answer>").reason


def test_composer_sums_weighted_components_and_keeps_everything():
    c = RewardComposer({"correct": 1.0, "format": 0.2})
    out = c.compose(VerifierResult({"correct": 1.0, "format": 0.5, "length": 0.3}, {"reason": ""}))
    # 1.0 * 1.0 + 0.2 * 0.5 = 1.1; `length` is stored but has no weight
    assert out.reward == pytest.approx(1.1)
    assert out.components == {"correct": 1.0, "format": 0.5, "length": 0.3}
    assert out.to_dict()["reward_weights"] == {"correct": 1.0, "format": 0.2}


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_composer_refuses_non_finite_components(value):
    with pytest.raises(RewardError, match="'correct' is"):
        RewardComposer({"correct": 1.0}).compose({"correct": value})


def test_composer_checks_names_early_and_weights_are_finite():
    from tracerl.verifiers import ExactMatch
    with pytest.raises(RewardError, match="unknown components"):
        RewardComposer.for_verifier(ExactMatch(), {"corect": 1.0})
    with pytest.raises(RewardError, match="weight 'correct'"):
        RewardComposer({"correct": math.nan})
    with pytest.raises(RewardError, match="did not produce"):
        RewardComposer({"correct": 1.0}).compose({"format": 1.0})
    with pytest.raises(RewardError, match="overflowed"):
        RewardComposer({"a": 1e308, "b": 1e308}).compose({"a": 10.0, "b": 10.0})


def test_verifier_results_cannot_hold_non_finite_values():
    with pytest.raises(ValueError, match="finite"):
        VerifierResult({"correct": math.nan})
