"""An `attempt_fn` backed by the rollout engine: N episodes per task under the current policy.

It lives in the rollout layer (it plays episodes) and hands `tasks.profile` an `AttemptFn`, so the
task package never imports torch or the rollout stack. Used by `tracerl tasks profile` and by a
trainer that re-profiles between stages (`reprofile_stage`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import torch

from tracerl.contract import Trajectory, is_success
from tracerl.contract.task import Task
from tracerl.envs.base import EnvSpec
from tracerl.rollout.agent_loop import LoopBudgets, run_episodes
from tracerl.rollout.engine import TorchEngine
from tracerl.tasks.profile import AttemptFn


def engine_attempt_fn(engine: TorchEngine, spec: EnvSpec, *, budgets: LoopBudgets, sampling: dict, seed: int,
                      policy_version: int = 0, tokenizer_hashes: dict[str, str] | None = None,
                      on_trajectories: Callable[[list[Trajectory]], None] | None = None) -> AttemptFn:
    """attempt_fn(tasks, n) -> (successes, attempts) per task.

    An episode ending in `infra_failure` (sandbox crash, engine error) is neither a success nor a
    failure of the policy: it is left out of the attempts, so a pass rate only counts real tries.
    `on_trajectories` receives every batch of episodes (to store them, or to count generated tokens).
    """
    gen = torch.Generator().manual_seed(seed)
    calls = itertools.count()

    def attempt(tasks: list[Task], n: int) -> list[tuple[int, int]]:
        batch = [t for t in tasks for _ in range(n)]
        groups = [f"profile-{t.id}" for t in batch]
        trajs = run_episodes(engine, spec, batch, groups, budgets=budgets, sampling=sampling,
                             policy_version=policy_version, seed=seed * 100003 + next(calls) * 7919,
                             tokenizer_hashes=tokenizer_hashes, generator=gen)
        if on_trajectories is not None:
            on_trajectories(trajs)
        out = []
        for i in range(len(tasks)):
            chunk = [tr for tr in trajs[i * n:(i + 1) * n] if tr.trainable]
            out.append((sum(is_success(tr) for tr in chunk), len(chunk)))
        return out

    return attempt
