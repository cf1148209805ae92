"""What environments share to reward through a registered verifier (`tracerl.verifiers.registry`).

An environment collects the evidence its verifier reads (an answer, a final database, a world
state, a file system) and calls `grade(name, task, evidence)` when the episode ends; the step's
reward components are exactly the verifier's. `EnvVerifier` is the small base of the built-in
environment verifiers: `name`, `revision`, `components`, `primary`, `verify`, and `audit_cases`,
which are the environment's audit set (episodes played through the environment, and so through
this verifier; `tracerl audit <env>`).
"""

from __future__ import annotations

from typing import Any

from tracerl.verifiers.base import VerifierResult


class EnvVerifier:
    name: str = ""
    revision: str = ""
    env: str = ""
    components: tuple[str, ...] = ()
    primary: str = ""

    def score(self, task: Any, evidence: Any) -> tuple[dict[str, float], dict]:
        raise NotImplementedError

    def verify(self, task: Any, trajectory: Any) -> VerifierResult:
        comps, raw = self.score(task, trajectory)
        return VerifierResult({c: float(comps.get(c, 0.0)) for c in self.components}, raw)

    def audit_cases(self) -> list:
        from tracerl.verifiers.audit import get_audit

        return get_audit(self.env)[1]


def grade(name: str, task: Any, evidence: Any, **kwargs: Any) -> tuple[dict[str, float], dict]:
    """The registered verifier `name` on `evidence`: (reward components, info naming the verifier)."""
    from tracerl.verifiers.registry import get_verifier

    verifier = get_verifier(name, **kwargs)
    result = verifier.verify(task, evidence)
    info = {**result.raw, "verifier": verifier.name, "verifier_revision": str(verifier.revision)}
    return dict(result.components), info


def declared_verifier(spec) -> tuple[str, str]:
    """(name, revision) of the verifier an environment spec declares; an environment without one
    (a plugin written before verifiers were required) is recorded as `<env>.inline`, which says so."""
    if getattr(spec, "verifier", ""):
        from tracerl.verifiers.registry import verifier_identity

        return verifier_identity(spec.verifier)
    return f"{spec.name}.inline", spec.revision
