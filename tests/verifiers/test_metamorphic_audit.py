"""Metamorphic checks, the audit registry and the `tracerl audit` command."""

import json
import re

import pytest

from tracerl.cli import main
from tracerl.sandbox import Sandbox
from tracerl.verifiers import (AuditCase, ExactMatch, MetamorphicVerifier, NumericMatch, UnitTestVerifier,
                               audit_names, consistency, get_audit, register_audit, rename_entities, run_audit)


@pytest.fixture(scope="module")
def box():
    with Sandbox() as sandbox:
        yield sandbox


def test_memorised_inputs_fail_the_perturbed_tests(box):
    """Attack: a lookup table of the hidden inputs passes the originals, not their permutations."""
    v = MetamorphicVerifier(UnitTestVerifier(sandbox=box, timeout_s=0.5))
    report = run_audit(v)
    assert report.ok, report.to_dict()
    memorised = next(o for o in report.outcomes if o.name == "memorised-inputs")
    assert memorised.components["tests_passed"] == 1.0 and memorised.components["consistent_pass"] == 0.0


def test_entity_renaming_separates_reasoning_from_recall():
    task = {"prompt": "Alice has 3 apples and Bob gives her 4. How many apples does Alice have?", "answer": "7"}

    def genuine(t):
        a, b = map(int, re.findall(r"\d+", t["prompt"]))
        return f"<answer>{a + b}</answer>"

    def recall(t):  # memorised the exact prompt
        return "<answer>7</answer>" if t["prompt"].startswith("Alice has 3") else "<answer>0</answer>"

    perturbations = [rename_entities({"Alice": "Priya", "Bob": "Tom"})]
    assert consistency(genuine, task, perturbations, ExactMatch()).components["consistency"] == 1.0
    assert consistency(recall, task, perturbations, ExactMatch()).components["consistency"] == 0.5


@pytest.mark.parametrize("name", ["exact_match", "numeric", "format", "json_schema", "math_equivalence"])
def test_builtin_audits_have_no_false_positives_or_negatives(name):
    verifier, cases = get_audit(name)
    try:
        report = run_audit(verifier, cases)
    finally:
        getattr(verifier, "close", lambda: None)()
    assert report.false_positives == [] and report.false_negatives == []
    assert sum(not c.should_reward for c in cases) >= 5


def test_unit_test_audit_has_no_false_positives(box):
    verifier = UnitTestVerifier(sandbox=box, timeout_s=0.3)
    report = run_audit(verifier)
    assert report.ok, [(o.name, o.reason) for o in report.false_positives + report.false_negatives]


def test_environments_register_audits_and_the_cli_reports_them(capsys):
    # a deliberately loose verifier: 1.5 is "close to" 2.5 (|1| <= 1.0 * 2.5; integers would compare exactly)
    leaky = NumericMatch(rel_tol=1.0)
    register_audit("test_env_leaky", lambda: (leaky, [
        AuditCase("good", {"answer": "2.5"}, "<answer>2.5</answer>", True),
        AuditCase("off-by-one", {"answer": "2.5"}, "<answer>1.5</answer>", False, "a wrong number within tolerance")]))
    assert "test_env_leaky" in audit_names()
    assert main(["audit", "test_env_leaky"]) == 1
    out = capsys.readouterr().out
    assert "FP  off-by-one" in out and "false positives (adversarial rewarded): 1" in out
    assert main(["audit", "numeric", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["false_positives"] == 0 and data["adversarial"] >= 5
    assert main(["audit", "no_such_thing"]) == 2
    with pytest.raises(ValueError, match="already registered"):
        register_audit("test_env_leaky", lambda: (leaky, []))


def test_cli_accepts_module_attribute():
    assert main(["audit", "tracerl.verifiers.answers:ExactMatch"]) == 0
