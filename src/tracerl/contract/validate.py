"""Contract validation: every trajectory is checked before it is stored or trained on.

A violation raises `ContractError` naming the trajectory, the position (or -1 when the rule is
about the whole episode) and the rule, so a broken rollout is found where it broke.
"""

from __future__ import annotations

import math

from tracerl.contract.roles import TerminalReason, TokenRole
from tracerl.contract.trajectory import Trajectory, ids_sha256

RULES = (
    "lengths",  # all per-token arrays have equal length
    "role_values",  # every role is a TokenRole
    "pad_trailing",  # PAD tokens only after every real token, so ACTION ⊆ non-PAD
    "action_logprobs",  # behavior log-prob finite and <= 0 exactly on ACTION tokens
    "action_versions",  # policy version >= 0 exactly on ACTION tokens
    "span_bounds",  # spans lie inside the sequence and cover tokens of their own role
    "action_provenance",  # action ids are exactly those the engine sampled (no re-tokenization)
    "reward",  # reward == sum(weight * component), all finite, weights named like components
    "terminal_reason",  # every finished trajectory says why it ended
    "truncation",  # truncated <=> the terminal reason is a truncation
    "infra_failure",  # an infrastructure failure carries no reward
)

_SPAN_ROLE = {"action": TokenRole.ACTION, "observation": TokenRole.OBSERVATION}


class ContractError(ValueError):
    """A trajectory broke a rule of the trajectory contract."""

    def __init__(self, trajectory_id: str, position: int, rule: str, detail: str):
        self.trajectory_id, self.position, self.rule = trajectory_id, position, rule
        where = f"position {position}" if position >= 0 else "episode"
        super().__init__(f"trajectory {trajectory_id!r}, {where}, rule {rule!r}: {detail}")


def validate(traj: Trajectory) -> Trajectory:
    """Check every rule in `RULES`; return the trajectory unchanged when it holds."""
    tid = traj.trajectory_id

    def fail(pos: int, rule: str, detail: str) -> None:
        raise ContractError(tid, pos, rule, detail)

    n = len(traj.token_ids)
    for name in ("roles", "behavior_logprobs", "policy_versions"):
        if len(getattr(traj, name)) != n:
            fail(-1, "lengths", f"{name} has {len(getattr(traj, name))} entries for {n} tokens")

    seen_pad = False
    for i, r in enumerate(traj.roles):
        if not isinstance(r, TokenRole):
            try:
                TokenRole(r)
            except ValueError:
                fail(i, "role_values", f"{r!r} is not a TokenRole")
        if r == TokenRole.PAD:
            seen_pad = True
        elif seen_pad:
            fail(i, "pad_trailing", "a real token follows padding")

    for i, (r, lp, v) in enumerate(zip(traj.roles, traj.behavior_logprobs, traj.policy_versions)):
        if r == TokenRole.ACTION:
            if not (math.isfinite(lp) and lp <= 0.0):
                fail(i, "action_logprobs", f"action token has behavior log-prob {lp}")
            if v < 0:
                fail(i, "action_versions", f"action token has policy version {v}")
        else:
            if not math.isnan(lp):
                fail(i, "action_logprobs", f"{TokenRole(r).label} token carries log-prob {lp}")
            if v != -1:
                fail(i, "action_versions", f"{TokenRole(r).label} token carries policy version {v}")

    for span in traj.spans:
        if not (0 <= span.start <= span.end <= n):
            fail(max(span.start, 0), "span_bounds", f"span {span.span_id} [{span.start},{span.end}) outside [0,{n})")
        want = _SPAN_ROLE.get(span.kind)
        if want is not None:
            for i in range(span.start, span.end):
                if traj.roles[i] != want:
                    fail(i, "span_bounds", f"{span.kind} span {span.span_id} covers a {TokenRole(traj.roles[i]).label} token")
        if span.kind == "action" and span.sampled_ids_sha256 is not None:
            if ids_sha256(traj.token_ids[span.start:span.end]) != span.sampled_ids_sha256:
                fail(span.start, "action_provenance", f"action span {span.span_id} ids differ from what the engine sampled")
    covered = {i for s in traj.spans if s.kind == "action" for i in range(s.start, s.end)}
    for i, r in enumerate(traj.roles):
        if r == TokenRole.ACTION and i not in covered:
            fail(i, "action_provenance", "action token outside any engine-recorded action span")

    comps, weights = traj.reward_components, traj.reward_weights
    if set(comps) != set(weights):
        fail(-1, "reward", f"components {sorted(comps)} and weights {sorted(weights)} name different things")
    values = list(comps.values()) + list(weights.values()) + [traj.reward]
    if not all(math.isfinite(x) for x in values):
        fail(-1, "reward", "a reward, component or weight is not finite")
    total = sum(weights[k] * comps[k] for k in comps)
    if abs(total - traj.reward) > 1e-6 * max(1.0, abs(total)):
        fail(-1, "reward", f"reward {traj.reward} != sum(weight * component) = {total}")

    if traj.terminal_reason is None:
        fail(-1, "terminal_reason", "trajectory has no terminal reason")
    reason = TerminalReason(traj.terminal_reason)
    if traj.truncated != reason.is_truncation:
        fail(-1, "truncation", f"truncated={traj.truncated} but terminal reason is {reason.value}")
    if reason == TerminalReason.INFRA_FAILURE and (traj.reward != 0.0 or any(comps.values())):
        fail(-1, "infra_failure", "an infrastructure failure carries a reward")
    return traj
