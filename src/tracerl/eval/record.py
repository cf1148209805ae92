"""Build a held-out `Protocol` and record one evaluation's numbers beside it.

Used by `tracerl eval` and meant for the trainer's in-run held-out evaluations, so both write the
same record and name their metrics by the same protocol column.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tracerl.eval.aggregate import aggregate, samples_from_trajectories
from tracerl.eval.protocol import Protocol, write_results
from tracerl.store.export import run_tokenizer


def heldout_protocol(*, model, tokenizer_hashes: dict[str, str], spec, tasks: Sequence[Any], sampling: dict[str, Any],
                     budgets, n: int, ks: Sequence[int], seed: int, split: str = "heldout") -> Protocol:
    """The protocol of a held-out run: weights hash, tokenizer hashes, env/verifier revision, tasks, sampling, budgets."""
    from tracerl.models.load import model_sha256
    from tracerl.contract.task import tasks_sha256

    from tracerl.envs._verify import declared_verifier

    return Protocol(checkpoint_sha256=model_sha256(model), env_name=spec.name, env_revision=spec.revision,
                    verifier_revision=declared_verifier(spec)[1], split=split, tasks_sha256=tasks_sha256(list(tasks)),
                    num_tasks=len(tasks), sampling=dict(sampling),
                    budgets={"max_turns": budgets.max_turns, "max_tokens": budgets.max_tokens,
                             "max_new_tokens": budgets.max_new_tokens},
                    n=n, ks=sorted(ks), seed=seed, **tokenizer_hashes)


def record_evaluation(root, protocol: Protocol, trajectories: Sequence[Any], *, run=None, step: int | None = None,
                      extra: dict[str, float] | None = None, tokenizer=None, samples: int = 8) -> dict[str, float]:
    """Aggregate, write `<root>/eval/<column>/<checkpoint>/`, and (given a RunDir) store the episodes
    under stage `eval/<column>`, log `eval/<column>/<name>` at `step` and log up to `samples` sample
    completions (the best and the worst by reward). Both go through the run directory, so every
    attached logger (TensorBoard, W&B, MLflow) receives them. Returns the numbers."""
    from tracerl.contract import is_success

    per_task = samples_from_trajectories(trajectories, is_success)
    results = aggregate(per_task, protocol.ks) | dict(extra or {})
    write_results(root, protocol, results, per_task)
    if run is not None:
        run.store.add_trajectories(list(trajectories), stage=f"eval/{protocol.column}", step=step or 0)
        run.log_metrics(protocol.metric_names(results), stage="eval", step=step or 0)
        rows = sample_rows(trajectories, tokenizer if tokenizer is not None else run_tokenizer(run), limit=samples)
        run.log_samples(rows, stage=f"eval/{protocol.column}", step=step or 0)
    return results


def sample_rows(trajectories: Sequence[Any], tokenizer=None, *, limit: int = 8) -> list[dict[str, Any]]:
    """Up to `limit` rows for a samples table: the best half and the worst half by reward."""
    from tracerl.contract import is_success
    from tracerl.store.export import decode_parts

    ranked = sorted(trajectories, key=lambda t: -t.reward)
    picked = ranked if len(ranked) <= limit else ranked[: limit - limit // 2] + ranked[len(ranked) - limit // 2:]
    rows = []
    for t in picked:
        _, completion = decode_parts(t, tokenizer)
        rows.append({"task_id": t.task_id, "reward": round(float(t.reward), 4), "success": bool(is_success(t)),
                     "terminal_reason": t.terminal_reason.value if t.terminal_reason else None,
                     "completion": completion})
    return rows
