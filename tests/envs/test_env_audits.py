"""The suite's audit sets run through the verifier audit registry (`tracerl audit`)."""

import importlib

import pytest

from tracerl.cli import main
from tracerl.envs import env_names
from tracerl.verifiers.audit import audit_names, get_audit, run_audit

SUITE = ["math_tool", "search_qa", "text_world", "workplace_db", "code_tests", "reasoning_gym", "terminal", "swe"]


@pytest.mark.parametrize("name", SUITE)
def test_registered_audit_has_no_false_positives_or_negatives(name):
    if name == "reasoning_gym":
        pytest.importorskip("reasoning_gym")
    env_names()  # imports every environment package, which registers its audit
    assert name in audit_names()
    verifier, cases = get_audit(name)
    report = run_audit(verifier, cases)
    assert report.ok, [o for o in report.outcomes if o.rewarded != o.should_reward]
    assert len(report.false_positives) == 0 and sum(not c.should_reward for c in cases) >= 5


def test_tracerl_audit_accepts_an_env_builder(capsys):
    importlib.import_module("tracerl.envs.workplace_db")
    assert main(["audit", "tracerl.envs.workplace_db:audit"]) == 0
    out = capsys.readouterr().out
    assert "SQL injection through values" in out and "false positives (adversarial rewarded): 0" in out


def test_math_tool_refuses_digits_of_other_scripts():
    """int() reads Arabic-Indic digits; the check used to accept them as the integer."""
    from tracerl.envs.math_tool import check_answer
    assert check_answer("\u0667\u0663", "73") == 0.0 and check_answer("73", "73") == 1.0
