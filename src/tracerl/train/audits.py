"""Verifier audits replayed during training, so `gates.audit_failures_max` watches a live number.

Every `gates.audit_every` steps the environment's audit set (`tracerl audit <env>`: adversarial
outputs that must not be rewarded, good ones that must) is run again through its verifier. Accepted
adversarial outputs are `verifier/audit_failures`; rejected good ones `verifier/audit_false_negatives`.
A run that sets the gate on an environment without an audit set is refused before it starts.
"""

from __future__ import annotations

from tracerl.errors import UserError
from tracerl.telemetry.gates import GatesConfig


class AuditReplay:
    def __init__(self, name: str | None, every: int):
        self.name, self.every = name, every

    @classmethod
    def for_run(cls, spec, gates: GatesConfig) -> AuditReplay:
        if gates.audit_failures_max is None:
            return cls(None, 0)
        from tracerl.verifiers.audit import audit_names

        if spec.name not in audit_names():
            raise UserError(f"gates.audit_failures_max is set but environment {spec.name!r} has no audit set; "
                            f"unset the gate or register one (`tracerl audit --list` shows them)")
        return cls(spec.name, gates.audit_every)

    def metrics(self, step: int) -> dict[str, float]:
        """The audit's counts at every `every`-th step; nothing on the others."""
        if self.name is None or step % self.every:
            return {}
        from tracerl.verifiers.audit import get_audit, run_audit

        verifier, cases = get_audit(self.name)
        try:
            report = run_audit(verifier, cases)
        finally:
            close = getattr(verifier, "close", None)
            if callable(close):
                close()
        return {"verifier/audit_failures": float(len(report.false_positives)),
                "verifier/audit_false_negatives": float(len(report.false_negatives)),
                "verifier/audit_cases": float(len(cases))}
