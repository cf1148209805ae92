"""Verifiers (docs/architecture.md, "Verifiers"): programs that decide rewards, each with a name, a revision and an
audit set of outputs that must not be rewarded (and of outputs that must).

    from tracerl.verifiers import MathEquivalence, RewardComposer
    verifier = MathEquivalence()
    result = verifier.verify({"answer": "1/2"}, "<answer>0.5</answer>")   # components + raw
    reward = RewardComposer.for_verifier(verifier, {"correct": 1.0, "format": 0.1}).compose(result)
"""

from tracerl.verifiers.answers import ExactMatch, NumericMatch, normalize_text, parse_number
from tracerl.verifiers.audit import AuditReport, audit_names, get_audit, register_audit, run_audit
from tracerl.verifiers.base import AuditCase, Verifier, VerifierResult, task_field, text_of
from tracerl.verifiers.compose import ComposedReward, RewardComposer, RewardError
from tracerl.verifiers.extract import extract_answer, extract_code
from tracerl.verifiers.format import FormatCheck
from tracerl.verifiers.json_schema import JsonSchemaVerifier, parse_strict_json
from tracerl.verifiers.math_equiv import MathEquivalence
from tracerl.verifiers.metamorphic import MetamorphicVerifier, Perturbation, consistency, rename_entities
from tracerl.verifiers.unit_tests import UnitTestVerifier, same_value

__all__ = ["AuditCase", "AuditReport", "ComposedReward", "ExactMatch", "FormatCheck", "JsonSchemaVerifier",
           "MathEquivalence", "MetamorphicVerifier", "NumericMatch", "Perturbation", "RewardComposer",
           "RewardError", "UnitTestVerifier", "Verifier", "VerifierResult", "audit_names", "consistency",
           "extract_answer", "extract_code", "get_audit", "normalize_text", "parse_number", "parse_strict_json",
           "register_audit", "rename_entities", "run_audit", "same_value", "task_field", "text_of"]
