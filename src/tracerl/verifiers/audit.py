"""Verifier audits: run a verifier on outputs that must not be rewarded and on outputs that must.

Any verifier or environment can register its audit set by name:

    from tracerl.verifiers.audit import register_audit
    register_audit("math_tool", lambda: (MyVerifier(), my_cases()))

`tracerl audit NAME` runs it and reports accepted adversarial outputs (false positives) and
rejected good ones (false negatives). "Rewarded" means the verifier's `primary` component is > 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from tracerl.errors import UserError
from tracerl.verifiers.base import AuditCase

AuditBuilder = Callable[[], "tuple[Any, list[AuditCase]]"]
_REGISTRY: dict[str, AuditBuilder] = {}


def register_audit(name: str, build: AuditBuilder, *, replace: bool = False) -> None:
    """Make `tracerl audit NAME` run `build()`'s (verifier, cases). Names are unique."""
    if not callable(build):
        raise TypeError(f"register_audit({name!r}, ...) needs a function returning (verifier, cases)")
    if name in _REGISTRY and not replace and _REGISTRY[name] is not build:
        raise ValueError(f"an audit named {name!r} is already registered; pass replace=True to override it")
    _REGISTRY[name] = build


def audit_names() -> list[str]:
    _register_builtins()
    return sorted(_REGISTRY)


def get_audit(name: str) -> tuple[Any, list[AuditCase]]:
    _register_builtins()
    if name not in _REGISTRY:
        raise UserError(f"no audit named {name!r}; known: {', '.join(sorted(_REGISTRY))} "
                        "(environments register theirs with tracerl.verifiers.audit.register_audit)")
    verifier, cases = _REGISTRY[name]()
    return verifier, list(cases)


@dataclass
class CaseOutcome:
    name: str
    should_reward: bool
    rewarded: bool
    components: dict[str, float]
    reason: str
    attack: str
    seconds: float


@dataclass
class AuditReport:
    verifier: str
    revision: str
    outcomes: list[CaseOutcome] = field(default_factory=list)

    @property
    def false_positives(self) -> list[CaseOutcome]:
        """Adversarial outputs that were rewarded."""
        return [o for o in self.outcomes if o.rewarded and not o.should_reward]

    @property
    def false_negatives(self) -> list[CaseOutcome]:
        """Known-good outputs that were not rewarded."""
        return [o for o in self.outcomes if o.should_reward and not o.rewarded]

    @property
    def ok(self) -> bool:
        return not self.false_positives and not self.false_negatives

    def to_dict(self) -> dict:
        return {"verifier": self.verifier, "revision": self.revision,
                "adversarial": sum(not o.should_reward for o in self.outcomes),
                "good": sum(o.should_reward for o in self.outcomes),
                "false_positives": len(self.false_positives), "false_negatives": len(self.false_negatives),
                "cases": [asdict(o) for o in self.outcomes]}


def run_audit(verifier: Any, cases: list[AuditCase] | None = None) -> AuditReport:
    """Verify every case; an exception in the verifier is a finding (never rewarded), not a crash."""
    report = AuditReport(getattr(verifier, "name", type(verifier).__name__), str(getattr(verifier, "revision", "?")))
    for case in cases if cases is not None else verifier.audit_cases():
        t0 = time.perf_counter()
        try:
            result = verifier.verify(case.task, case.output)
            components, reason = dict(result.components), result.reason
            rewarded = components.get(verifier.primary, 0.0) > 0
        except Exception as exc:  # noqa: BLE001 - a verifier that raises on an input is reported
            components, reason, rewarded = {}, f"verifier raised {type(exc).__name__}: {exc}", False
        report.outcomes.append(CaseOutcome(case.name, case.should_reward, rewarded, components, reason,
                                           case.attack, time.perf_counter() - t0))
    return report


def run_audit_and_close(verifier: Any, cases: list[AuditCase]) -> AuditReport:
    """`run_audit`, then release the verifier's resources (worker pools) whatever happened."""
    try:
        return run_audit(verifier, cases)
    finally:
        close = getattr(verifier, "close", None)
        if callable(close):
            close()


_builtins_done = False


def _register_builtins() -> None:
    global _builtins_done
    if _builtins_done:
        return
    _builtins_done = True
    from tracerl.verifiers.answers import ExactMatch, NumericMatch
    from tracerl.verifiers.format import FormatCheck
    from tracerl.verifiers.json_schema import JsonSchemaVerifier
    from tracerl.verifiers.math_equiv import MathEquivalence
    from tracerl.verifiers.metamorphic import MetamorphicVerifier
    from tracerl.verifiers.unit_tests import UnitTestVerifier

    def own(factory: Callable[[], Any]) -> AuditBuilder:
        def build() -> tuple[Any, list[AuditCase]]:
            verifier = factory()
            return verifier, verifier.audit_cases()
        return build

    for name, factory in (("exact_match", ExactMatch), ("numeric", NumericMatch), ("format", FormatCheck),
                          ("json_schema", JsonSchemaVerifier), ("math_equivalence", MathEquivalence),
                          ("unit_tests", lambda: UnitTestVerifier(timeout_s=1.0)),
                          ("metamorphic", lambda: MetamorphicVerifier(UnitTestVerifier(timeout_s=1.0)))):
        _REGISTRY.setdefault(name, own(factory))
