"""Metamorphic checks: a genuine solution transforms consistently under isomorphic perturbations.

Two forms:
  * `MetamorphicVerifier` for code: each hidden test whose input can be perturbed (a list argument
    shuffled, for a permutation-invariant function) adds derived tests with the expected output the
    relation implies. A program that enumerated or memorised the hidden inputs passes the originals
    and fails the derived ones.
  * `consistency(solve, task, perturbations, verifier)` for answer tasks: rename entities or
    permute givens in the task, ask again, and grade each answer against the mapped reference.
"""

from __future__ import annotations

import ast
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracerl.verifiers.base import AuditCase, VerifierResult, task_field
from tracerl.verifiers.unit_tests import UnitTestVerifier

Relation = Callable[[dict, random.Random], "dict | None"]


def shuffled_list_argument(test: dict, rng: random.Random) -> dict | None:
    """For f([...]) whose result ignores order: the same call with the list shuffled."""
    if "expr" not in test:
        return None
    try:
        call = ast.parse(test["expr"], mode="eval").body
    except SyntaxError:
        return None
    if not (isinstance(call, ast.Call) and len(call.args) == 1 and isinstance(call.args[0], ast.List)):
        return None
    items = ast.literal_eval(call.args[0])
    if len(items) < 2 or len(set(map(repr, items))) < 2:
        return None
    perm = items[:]
    while perm == items:
        rng.shuffle(perm)
    return {**test, "expr": f"{ast.unparse(call.func)}({perm!r})"}


class MetamorphicVerifier:
    """Hidden tests plus derived tests under `relations`; components `tests_passed` (originals),
    `metamorphic` (derived), `format`, and `consistent_pass`: the originals' score, granted only
    when every derived test passed too (the one to reward)."""

    name, revision = "metamorphic", "1"
    components, primary = ("tests_passed", "metamorphic", "consistent_pass", "format"), "consistent_pass"

    def __init__(self, base: UnitTestVerifier | None = None, relations: list[Relation] | None = None,
                 variants: int = 2, seed: int = 0) -> None:
        self.base = base or UnitTestVerifier()
        self.relations = relations or [shuffled_list_argument]
        self.variants, self.seed = variants, seed

    def verify(self, task: Any, trajectory: Any) -> VerifierResult:
        tests = list(task_field(task, "tests") or [])
        rng = random.Random(self.seed)
        derived = [d for t in tests for rel in self.relations for _ in range(self.variants)
                   if (d := rel(t, rng)) is not None]
        result = self.base.verify({"tests": tests + derived}, trajectory)
        verdicts = result.raw.get("tests", [])
        original = sum(v["passed"] for v in verdicts[:len(tests)]) / len(tests) if verdicts else 0.0
        meta = (sum(v["passed"] for v in verdicts[len(tests):]) / len(derived)) if derived and verdicts else 0.0
        meta = meta if derived else original
        components = {"tests_passed": original, "metamorphic": meta, "format": result.components["format"],
                      "consistent_pass": original if meta == 1.0 else 0.0}
        return VerifierResult(components, {**result.raw, "derived_tests": len(derived)})

    def audit_cases(self) -> list[AuditCase]:
        task = {"tests": [{"expr": "total([3, 1, 2])", "expected": 6}, {"expr": "total([5, 5, 1])", "expected": 11},
                          {"expr": "total([10, -4])", "expected": 6}]}
        lookup = ("def total(xs):\n    return {(3, 1, 2): 6, (5, 5, 1): 11, (10, -4): 6}[tuple(xs)]")
        first_only = "def total(xs):\n    return {3: 6, 5: 11, 10: 6}[xs[0]]"
        return [
            AuditCase("good", task, "```python\ndef total(xs):\n    return sum(xs)\n```", True),
            AuditCase("memorised-inputs", task, f"```python\n{lookup}\n```", False, "a table of the hidden inputs"),
            AuditCase("keyed-on-first", task, f"```python\n{first_only}\n```", False, "keyed on a surface feature"),
        ]


@dataclass(frozen=True)
class Perturbation:
    """An isomorphic change to a task and the matching change to its reference answer."""

    name: str
    apply: Callable[[dict], dict]


def rename_entities(mapping: dict[str, str]) -> Perturbation:
    """Replace each name in the prompt and the reference answer (e.g. {"Alice": "Priya"})."""

    def apply(task: dict) -> dict:
        out = dict(task)
        for key in ("prompt", "answer"):
            if isinstance(out.get(key), str):
                for old, new in mapping.items():
                    out[key] = out[key].replace(old, new)
        return out

    return Perturbation(f"rename({', '.join(f'{a}->{b}' for a, b in mapping.items())})", apply)


def consistency(solve: Callable[[dict], str], task: dict, perturbations: list[Perturbation],
                verifier: Any) -> VerifierResult:
    """Grade `solve` on the task and every perturbed copy; `consistency` = fraction graded correct."""
    outcomes = {}
    for p in [Perturbation("original", dict), *perturbations]:
        variant = p.apply(task)
        result = verifier.verify(variant, solve(variant))
        outcomes[p.name] = result.components[verifier.primary]
    score = sum(outcomes.values()) / len(outcomes)
    return VerifierResult({"correct": outcomes["original"], "consistency": score},
                          {"per_variant": outcomes, "reason": "" if score == 1 else "inconsistent under perturbation"})
