"""JSON answers checked against a JSON Schema (task field `schema`), strictly parsed.

Refused before validation: text outside the `<answer>` tags, anything but exactly one JSON
document, NaN/Infinity/overflowing numbers, duplicate keys (two readers could see two different
objects), documents over `max_chars` or nested deeper than `max_depth`.
"""

from __future__ import annotations

import json
import math
from typing import Any

import jsonschema

from tracerl.verifiers.base import AuditCase, VerifierResult, rejected, task_field, text_of
from tracerl.verifiers.extract import extract_answer


class _Refused(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise _Refused(f"duplicate keys {sorted({k for k in keys if keys.count(k) > 1})}")
    return dict(pairs)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"number {text[:30]} overflows to infinity")
    return value


def _constant(name: str) -> Any:
    raise _Refused(f"{name} is not JSON")


def _depth(value: Any, limit: int, level: int = 0) -> None:
    if level > limit:
        raise _Refused(f"nested deeper than {limit} levels")
    if isinstance(value, dict):
        for v in value.values():
            _depth(v, limit, level + 1)
    elif isinstance(value, list):
        for v in value:
            _depth(v, limit, level + 1)


def parse_strict_json(text: str, *, max_chars: int = 100_000, max_depth: int = 32) -> Any:
    """One JSON document, strictly; raises ValueError with the reason."""
    s = text.strip()
    if s.startswith("```"):
        s = s.split("\n", 1)[1] if "\n" in s else ""
        s = s.rsplit("```", 1)[0]
    if len(s) > max_chars:
        raise _Refused(f"document is {len(s)} characters, more than {max_chars}")
    if s.count("[") + s.count("{") > 50_000:
        raise _Refused("too many nested containers")
    try:
        value = json.loads(s, object_pairs_hook=_no_duplicates, parse_float=_finite_float,
                           parse_constant=_constant)
    except _Refused:
        raise
    except RecursionError:
        raise _Refused(f"nested deeper than {max_depth} levels") from None
    except ValueError as exc:
        raise _Refused(f"not a single JSON document ({str(exc)[:80]})") from None
    _depth(value, max_depth)
    return value


class JsonSchemaVerifier:
    """`valid` is 1 when the answer is one strict JSON document that satisfies the task's schema."""

    name, revision = "json_schema", "1"
    components, primary = ("valid", "format"), "valid"

    def verify(self, task: Any, trajectory: Any) -> VerifierResult:
        got = extract_answer(text_of(trajectory), max_chars=100_000)
        if not got.ok:
            return rejected(self.components, got.reason)
        try:
            value = parse_strict_json(got.value)
        except ValueError as exc:
            return rejected(self.components, f"refused: {exc}")
        schema = task_field(task, "schema")
        validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
        if errors:
            where = "/".join(map(str, errors[0].path)) or "(root)"
            return VerifierResult({"valid": 0.0, "format": 1.0},
                                  {"reason": f"schema violation at {where}: {errors[0].message[:200]}",
                                   "errors": len(errors)})
        return VerifierResult({"valid": 1.0, "format": 1.0}, {"reason": ""})

    def audit_cases(self) -> list[AuditCase]:
        schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
                                                   "score": {"type": "number"}},
                  "required": ["name", "age"], "additionalProperties": False}
        t = {"schema": schema}
        return [
            AuditCase("good", t, '<answer>{"name": "Ada", "age": 36}</answer>', True),
            AuditCase("good-fenced", t, '<answer>\n```json\n{"name": "Ada", "age": 36, "score": 1.5}\n```\n</answer>', True),
            AuditCase("nan", t, '<answer>{"name": "Ada", "age": 36, "score": NaN}</answer>', False, "NaN in JSON"),
            AuditCase("infinity", t, '<answer>{"name": "Ada", "age": 36, "score": 1e999}</answer>', False, "overflow to inf"),
            AuditCase("duplicate-keys", t, '<answer>{"name": "Ada", "age": -1, "age": 36}</answer>', False,
                      "duplicate keys: the validator sees one value, a consumer another"),
            AuditCase("wrong-type", t, '<answer>{"name": "Ada", "age": "36"}</answer>', False, "number as a string"),
            AuditCase("bool-as-int", t, '<answer>{"name": "Ada", "age": true}</answer>', False, "true is not an integer"),
            AuditCase("extra-field", t, '<answer>{"name": "Ada", "age": 36, "admin": true}</answer>', False, "smuggled field"),
            AuditCase("two-documents", t, '<answer>{"name": "Ada", "age": 36} {"name": "Bob"}</answer>', False,
                      "two documents, one valid"),
            AuditCase("deep-nesting", t, "<answer>" + "[" * 5000 + "]" * 5000 + "</answer>", False,
                      "nesting that overflows a recursive parser"),
            AuditCase("outside-tags", t, '{"name": "Ada", "age": 36}', False, "JSON outside the answer tags"),
        ]
