"""Checks replayed during training, so the gates that watch them see live numbers.

Engine probe (`gates.probe_logprob_diff_max`): before the first update of an RL stage (the weights
the first batch was sampled with), after every weight sync of an engine that holds its own weights
(HF generate on a copy, vLLM, a remote server: rollout/engine_api.py `owns_weights`), and every
`gates.probe_every` steps otherwise, fixed prefixes (the prompts of the first batch) are continued
by the rollout engine and re-scored by the learner (`telemetry.probe`); `probe/logprob_absdiff_max`
is the largest |engine − learner| log-prob — the training/inference mismatch a stale or drifting
engine shows. When two probes fall in one step the worse numbers are logged.


Every `gates.audit_every` steps the environment's audit set (`tracerl audit <env>`: adversarial
outputs that must not be rewarded, good ones that must) is run again through its verifier. Accepted
adversarial outputs are `verifier/audit_failures`; rejected good ones `verifier/audit_false_negatives`.
A run that sets the gate on an environment without an audit set is refused before it starts.
"""

from __future__ import annotations

from tracerl.errors import UserError
from tracerl.config.gates import GatesConfig


class AuditReplay:
    """The audit sets of the run's environments (one, or each of an `envs:` run), replayed every `every` steps."""

    def __init__(self, names: list[str], every: int):
        self.names, self.every = names, every

    @classmethod
    def for_run(cls, spec, gates: GatesConfig) -> AuditReplay:
        if gates.audit_failures_max is None:
            return cls([], 0)
        from tracerl.verifiers.audit import audit_names

        names = list(getattr(spec, "routes", None) or [spec.name])  # an envs: router: every environment
        for name in names:
            if name not in audit_names():
                raise UserError(f"gates.audit_failures_max is set but environment {name!r} has no audit set; "
                                f"unset the gate or register one (`tracerl audit --list` shows them)")
        return cls(names, gates.audit_every)

    def metrics(self, step: int) -> dict[str, float]:
        """The audits' counts (summed over the environments, and per environment when there are several) at every
        `every`-th step; nothing on the others."""
        if not self.names or step % self.every:
            return {}
        from tracerl.verifiers.audit import get_audit, run_audit_and_close

        out = {"verifier/audit_failures": 0.0, "verifier/audit_false_negatives": 0.0, "verifier/audit_cases": 0.0}
        for name in self.names:
            verifier, cases = get_audit(name)
            report = run_audit_and_close(verifier, cases)
            counts = {"audit_failures": float(len(report.false_positives)),
                      "audit_false_negatives": float(len(report.false_negatives)), "audit_cases": float(len(cases))}
            for k, v in counts.items():
                out[f"verifier/{k}"] += v
                if len(self.names) > 1:
                    out[f"verifier/{name}/{k}"] = v
        return out


class ProbeReplay:
    def __init__(self, every: int | None, n_prefixes: int = 4):
        self.every, self.n, self.prefixes = every, n_prefixes, None

    @classmethod
    def for_run(cls, gates: GatesConfig) -> ProbeReplay:
        return cls(gates.probe_every if gates.probe_logprob_diff_max is not None else None)

    def before_rl(self, engine, model, trajectories, temperature: float) -> dict[str, float]:
        """The probe before the first update this replay sees (a fresh or a resumed stage); nothing later."""
        if self.every is None or self.prefixes is not None or not trajectories:
            return {}
        return self._run(0, engine, model, trajectories, temperature)

    def metrics(self, step: int, engine, model, trajectories, temperature: float, *, synced: bool = False) -> dict[str, float]:
        """Probe metrics after a weight sync that copied tensors (`synced`) and every `every`-th step; else nothing."""
        if self.every is None or not trajectories or (not synced and step % self.every):
            return {}
        return self._run(step, engine, model, trajectories, temperature)

    def _run(self, step: int, engine, model, trajectories, temperature: float) -> dict[str, float]:
        if self.prefixes is None:  # the prompts of the first batch, fixed for the whole run
            from tracerl.contract import TokenRole

            self.prefixes = [t.token_ids[:t.roles.index(TokenRole.ACTION)] for t in trajectories[:self.n]]
        from tracerl.telemetry.probe import run_probe

        return run_probe(engine, model, self.prefixes, max_new_tokens=8, temperature=temperature, seed=step)

    @staticmethod
    def merge(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
        """Two probes of one step: the larger differences and the lower agreement."""
        out = {**a, **b}
        for k in set(a) & set(b):
            out[k] = min(a[k], b[k]) if k == "probe/token_agreement" else max(a[k], b[k])
        return out
