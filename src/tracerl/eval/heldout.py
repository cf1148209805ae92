"""Held-out evaluation under a fixed sampling protocol. Held-out episodes never produce reward
for training: they are stored under stage `eval` and only counted.
"""

from __future__ import annotations

import dataclasses
import time

import torch

from tracerl.algorithms.passk import pass_at_k
from tracerl.contract import Trajectory, is_success
from tracerl.contract.task import Task
from tracerl.envs.base import EnvSpec
from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes
from tracerl.telemetry.episodes import tool_calls


@dataclasses.dataclass
class HeldoutResult:
    success: float  # avg@n: mean success over tasks × samples
    pass_at: dict[int, float]  # unbiased pass@k
    n_tasks: int
    samples: int
    tool_calls_per_episode: float
    truncation_rate: float
    wall_s: float
    trajectories: list[Trajectory]
    infra_failure_rate: float = 0.0  # episodes ended by the infrastructure (counted as not solved, reported apart)

    def metrics(self, prefix: str = "eval") -> dict[str, float]:
        out = {f"{prefix}/success": self.success, f"{prefix}/tool_calls_per_episode": self.tool_calls_per_episode,
               f"{prefix}/truncation_rate": self.truncation_rate, f"{prefix}/infra_failure_rate": self.infra_failure_rate,
               f"{prefix}/wall_s": self.wall_s}
        out.update({f"{prefix}/pass@{k}": v for k, v in self.pass_at.items()})
        return out


def run_heldout(engine: TorchEngine, spec: EnvSpec, tasks: list[Task], *, samples: int, ks: list[int],
                budgets: LoopBudgets, sampling: dict, policy_version: int, seed: int,
                tokenizer_hashes: dict[str, str] | None = None, batch_episodes: int = 256,
                episodes=run_episodes) -> HeldoutResult:
    if any(t.split != "heldout" for t in tasks):
        raise ValueError("run_heldout takes held-out tasks only")
    t0 = time.time()
    gen = torch.Generator().manual_seed(seed)
    flat = [(t, f"eval-{t.id}") for t in tasks for _ in range(samples)]
    trajs: list[Trajectory] = []
    for s in range(0, len(flat), batch_episodes):
        chunk = flat[s:s + batch_episodes]
        trajs += episodes(engine, spec, [c[0] for c in chunk], [c[1] for c in chunk], budgets=budgets,
                              sampling=sampling, policy_version=policy_version, seed=seed + s,
                              tokenizer_hashes=tokenizer_hashes, generator=gen)
    per_task: dict[str, list[bool]] = {}
    for tr in trajs:
        if tr.verifier_output.get("segment", 0) == 0:  # a gateway episode split in several counts once
            per_task.setdefault(tr.task_id, []).append(is_success(tr))
    n_ok = [sum(v) for v in per_task.values()]
    pass_at = {k: sum(pass_at_k(samples, c, k) for c in n_ok) / len(n_ok) for k in ks if k <= samples}
    n_calls = sum(len(tool_calls(tr)) for tr in trajs)
    return HeldoutResult(
        success=sum(n_ok) / (len(n_ok) * samples), pass_at=pass_at, n_tasks=len(n_ok), samples=samples,
        tool_calls_per_episode=n_calls / len(trajs), truncation_rate=sum(t.truncated for t in trajs) / len(trajs),
        wall_s=time.time() - t0, trajectories=trajs,
        infra_failure_rate=sum(not t.trainable for t in trajs) / len(trajs))
