"""Build a held-out `Protocol` and record one evaluation's numbers beside it.

Used by `tracerl eval` and meant for the trainer's in-run held-out evaluations, so both write the
same record and name their metrics by the same protocol column.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tracerl.eval.aggregate import aggregate, samples_from_trajectories
from tracerl.eval.protocol import Protocol, write_results


def heldout_protocol(*, model, tokenizer_hashes: dict[str, str], spec, tasks: Sequence[Any], sampling: dict[str, Any],
                     budgets, n: int, ks: Sequence[int], seed: int, split: str = "heldout") -> Protocol:
    """The protocol of a held-out run: weights hash, tokenizer hashes, env/verifier revision, tasks, sampling, budgets."""
    from tracerl.models.load import model_sha256
    from tracerl.tasks.task import tasks_sha256

    return Protocol(checkpoint_sha256=model_sha256(model), env_name=spec.name, env_revision=spec.revision,
                    verifier_revision=spec.revision, split=split, tasks_sha256=tasks_sha256(list(tasks)),
                    num_tasks=len(tasks), sampling=dict(sampling),
                    budgets={"max_turns": budgets.max_turns, "max_tokens": budgets.max_tokens,
                             "max_new_tokens": budgets.max_new_tokens},
                    n=n, ks=sorted(ks), seed=seed, **tokenizer_hashes)


def record_evaluation(root, protocol: Protocol, trajectories: Sequence[Any], *, run=None, step: int | None = None,
                      extra: dict[str, float] | None = None) -> dict[str, float]:
    """Aggregate, write `<root>/eval/<column>/<checkpoint>/`, and (given a RunDir) store the episodes
    under stage `eval/<column>` and log `eval/<column>/<name>` at `step`. Returns the numbers."""
    from tracerl.eval.heldout import is_success

    per_task = samples_from_trajectories(trajectories, is_success)
    results = aggregate(per_task, protocol.ks) | dict(extra or {})
    write_results(root, protocol, results, per_task)
    if run is not None:
        run.store.add_trajectories(list(trajectories), stage=f"eval/{protocol.column}", step=step or 0)
        run.log_metrics(protocol.metric_names(results), stage="eval", step=step or 0)
    return results
