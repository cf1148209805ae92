"""The staleness bound η of asynchronous RL (AReaL, Fu et al. 2025, "bounded staleness").

Versions: the learner's policy version before training step s is `v0 + s`. A rollout job (one step's
batch) issued while `ahead` jobs are already buffered or in flight is meant for step s + ahead. Two
checks keep stale data honest:

- at generation start: a job may start only while ahead ≤ η (AReaL's ⌊(N_r − 1)/B⌋ ≤ i + η with N_r
  the rollouts generated or running, B the batch), so its tokens are sampled by a version at most η
  behind the one it is meant to be trained at;
- at batch formation: a trajectory whose oldest ACTION token lags the learner's version by more than
  η is rejected (stored apart and counted, never trained). A job that lands late (a long-tail episode
  while later jobs finished first) is what this catches.

A trajectory's lag is measured from its oldest token: with partial rollouts its later turns may
carry newer versions, but its first turn was sampled by the oldest policy it holds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from tracerl.contract import TokenRole, Trajectory


def oldest_version(traj: Trajectory) -> int | None:
    """The smallest policy version on the trajectory's ACTION tokens (None without action tokens)."""
    vs = [v for v, r in zip(traj.policy_versions, traj.roles) if r == TokenRole.ACTION and v >= 0]
    return min(vs) if vs else None


def lag(traj: Trajectory, learner_version: int) -> int:
    """Versions the trajectory's oldest token is behind `learner_version` (0 without action tokens)."""
    v = oldest_version(traj)
    return 0 if v is None else learner_version - v


@dataclasses.dataclass(frozen=True)
class StalenessGate:
    max_staleness: int  # η

    def may_start(self, ahead: int) -> bool:
        """AReaL's start rule: a new job, with `ahead` jobs buffered or in flight before it, is meant for
        step s + ahead; it starts only within η of the learner's step s."""
        return ahead <= self.max_staleness

    def split(self, trajs: Sequence[Trajectory], learner_version: int) -> tuple[list[Trajectory], list[Trajectory]]:
        """(admitted, rejected): the re-check when a batch is formed."""
        ok = [t for t in trajs if lag(t, learner_version) <= self.max_staleness]
        keep = {id(t) for t in ok}
        return ok, [t for t in trajs if id(t) not in keep]
