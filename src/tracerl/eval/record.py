"""Build a held-out `Protocol` and record one evaluation's numbers beside it.

Used by `tracerl eval` and the trainer's held-out evaluations, so both write the same record. Metric
names are readable and stable across loggers (`eval/avg@2`, `eval/pass@1`; `eval/<env>/avg@2` for one
environment of an `envs:` run); the protocol column that makes two numbers comparable is recorded beside
them, as the tag `eval/protocol` (`<prefix>/protocol`): a `tags` field in metrics.jsonl, a column of the
store's metrics table, a TensorBoard text / W&B value / MLflow tag (telemetry/loggers.py).
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


def metric_names(results: dict[str, float], prefix: str = "eval") -> dict[str, float]:
    """`{"avg@2": x}` -> `{"eval/avg@2": x}`: the logged name of each aggregate, without the protocol hash."""
    return {f"{prefix}/{k}": v for k, v in results.items()}


def protocol_tags(protocol: Protocol, prefix: str = "eval") -> dict[str, str]:
    """What is recorded beside the numbers of one evaluation: its protocol column."""
    return {f"{prefix}/protocol": protocol.column}


def record_evaluation(root, protocol: Protocol, trajectories: Sequence[Any], *, run=None, step: int | None = None,
                      extra: dict[str, float] | None = None, tokenizer=None, samples: int = 8,
                      prefix: str = "eval") -> dict[str, float]:
    """Aggregate, write `<root>/eval/<column>/<checkpoint>/`, and (given a RunDir) store the episodes
    under stage `eval/<column>`, log `<prefix>/<name>` at `step` with the tag `<prefix>/protocol` = the
    column, and log up to `samples` sample completions (the best and the worst by reward). Both go through
    the run directory, so every attached logger (TensorBoard, W&B, MLflow) receives them. `step` is the
    number of RL updates before the evaluation (0: before RL; N: after `rl step N`, checkpoint step_N).
    Returns the numbers."""
    from tracerl.contract import is_success

    per_task = samples_from_trajectories(trajectories, is_success)
    results = aggregate(per_task, protocol.ks) | dict(extra or {})
    write_results(root, protocol, results, per_task)
    if run is not None:
        run.store.add_trajectories(list(trajectories), stage=f"eval/{protocol.column}", step=step or 0)
        run.log_metrics(metric_names(results, prefix), stage="eval", step=step or 0,
                        tags=protocol_tags(protocol, prefix))
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
