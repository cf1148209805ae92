"""Environment audit sets as verifier audits (`tracerl audit <env>`).

An environment's audit case is a sequence of policy turns played through a fresh env, which rewards
through its registered verifier (`EnvSpec.verifier`); the episode is judged by the primary reward
component (the first reward weight). `AuditCase.output` holds the turns as a JSON list of strings.
The set is registered under the environment's name and under its verifier's name.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from tracerl.envs.base import EnvSpec


class EpisodeVerifier:
    """Plays the turns of an output through `spec.make()` and reports the terminating step's
    components (all zero, with a reason, when the episode does not end or ends in a tool fault)."""

    def __init__(self, spec: EnvSpec) -> None:
        self.spec = spec
        from tracerl.envs._verify import declared_verifier

        self.verifier_name, verifier_revision = declared_verifier(spec)
        self.name, self.revision = spec.name, f"{spec.revision}+{verifier_revision}"
        self.components = tuple(spec.reward_weights)
        self.primary = self.components[0]

    def verify(self, task, trajectory):
        from tracerl.verifiers.base import VerifierResult, text_of

        text = text_of(trajectory)
        try:
            turns = json.loads(text)
        except ValueError:
            turns = [text]
        if not (isinstance(turns, list) and all(isinstance(t, str) for t in turns)):
            turns = [text]
        env = self.spec.make()
        env.reset(task, 0)
        for i, turn in enumerate(turns):
            step = env.step(turn)
            if step.terminated:
                comps = {c: float(step.reward_components.get(c, 0.0)) for c in self.components}
                reason = f"ended as {step.terminal_reason.value} after {i + 1} turns"
                if step.terminal_reason.value == "infra_failure":
                    comps, reason = {c: 0.0 for c in self.components}, f"tool fault: {step.info}"
                return VerifierResult(comps, {"reason": reason, "turns": i + 1})
        return VerifierResult({c: 0.0 for c in self.components},
                              {"reason": f"the episode did not end in {len(turns)} turns", "turns": len(turns)})


def register(spec: EnvSpec, cases: Callable[[], list[dict]]):
    """Registers `spec`'s audit set with the verifier audit registry, when that registry exists, and
    returns its builder (so `tracerl audit tracerl.envs.<name>:audit` works too)."""
    try:
        from tracerl.verifiers.audit import register_audit
        from tracerl.verifiers.base import AuditCase
    except ImportError:
        return None

    def build():
        out = [AuditCase(name=f"{spec.name}-{i}", task=c["task"], output=json.dumps(c["actions"]),
                         should_reward=c["rewarded"], attack=c["attack"]) for i, c in enumerate(cases())]
        return EpisodeVerifier(spec), out

    register_audit(spec.name, build, replace=True)
    if spec.verifier:
        register_audit(spec.verifier, build, replace=True)
    return build
