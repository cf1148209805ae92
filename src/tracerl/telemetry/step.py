"""`step_metrics`: everything the trainer logs for one RL step, as slash-namespaced floats."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from tracerl.contract import Trajectory
from tracerl.telemetry import episodes, exploration
from tracerl.telemetry.align import action_positions, action_values, to_numpy
from tracerl.telemetry.importance import clip_fractions, importance_metrics, k3_kl


def scalar(value: Any) -> float:
    """A float from a Python number or a tensor/array; a non-scalar is summarised by its mean."""
    arr = to_numpy(value)
    return float(arr.reshape(-1)[0]) if arr.size == 1 else (float(arr.mean()) if arr.size else math.nan)


def step_metrics(
    trajectories: Sequence[Trajectory],
    *,
    advantages: Any = None,
    token_entropy: Any = None,
    loss_stats: dict[str, Any] | None = None,
    timings: dict[str, float] | None = None,
    policy_version: int = 0,
    logprobs: Any = None,
    ref_logprobs: Any = None,
    clip: tuple[float, float] | None = None,
    classify: exploration.Classifier | None = None,
) -> dict[str, float]:
    """Metrics of one RL step.

    trajectories   the step's episodes (infra failures included: they are counted, not averaged).
    advantages     per trajectory (adv_B) or per token; any layout of `telemetry.align`.
    token_entropy  entropy of the sampling distribution at each token (same layouts).
    loss_stats     the algorithm's detached stats; passed through as `policy/<name>` (names that
                   already hold a "/" are kept as they are).
    timings        seconds per phase -> `time/<phase>_s`; `throughput/tokens_per_s` divides the
                   generated (action) tokens by the "rollout" phase, or by the sum of phases.
    policy_version the learner's current version, for `staleness/*`.
    logprobs       current-policy log-probs of the tokens: gives `is/*` (ESS, weight quantiles),
                   `policy/kl_behavior`, and clip fractions when `clip=(ε_low, ε_high)` and no
                   loss stats provide them.
    ref_logprobs   reference-policy log-probs: gives `policy/kl_ref` (k3 estimate of KL(π_θ‖π_ref)).
    classify       action-type classifier (`exploration.tag_classifier`); by default spans of kind
                   "tool_call"/"answer" are used when the trajectories record them.
    """
    trajs = list(trajectories)
    out: dict[str, float] = {}
    for calc in (episodes.rollout_metrics, episodes.reward_metrics, episodes.group_metrics,
                 episodes.length_metrics, episodes.tool_metrics, episodes.source_metrics):
        out.update(calc(trajs))
    out.update(episodes.staleness_metrics(trajs, policy_version))

    if classify is None and exploration.has_typed_spans(trajs):
        classify = exploration.span_classifier
    labels = [list(classify(t)) for t in trajs] if classify is not None else None
    out.update(exploration.diversity_metrics(trajs, labels))

    adv = action_values(advantages, trajs, "advantages") if advantages is not None else None
    if token_entropy is not None:
        ent = action_values(token_entropy, trajs, "token_entropy")
        out.update(exploration.entropy_metrics(ent, labels=labels, advantages=adv))

    stats = {k if "/" in k else f"policy/{k}": scalar(v) for k, v in (loss_stats or {}).items()}
    if logprobs is not None:
        cur = np.concatenate(action_values(logprobs, trajs, "logprobs") or [np.zeros(0)])
        beh = np.concatenate([np.asarray(t.behavior_logprobs, dtype=np.float64)[action_positions(t)] for t in trajs]
                             or [np.zeros(0)])
        out.update(importance_metrics(cur, beh))
        if clip is not None and adv is not None and cur.size:
            low, high = clip_fractions(np.exp(cur - beh), np.concatenate(adv), clip_low=clip[0], clip_high=clip[1])
            out["policy/clip_frac_low"], out["policy/clip_frac_high"] = low, high
        if ref_logprobs is not None:
            ref = np.concatenate(action_values(ref_logprobs, trajs, "ref_logprobs") or [np.zeros(0)])
            out["policy/kl_ref"] = k3_kl(ref - cur)
    out.update(stats)  # what the optimizer saw wins over what is recomputed here

    if timings:
        for phase, seconds in timings.items():
            out[f"time/{phase}_s"] = float(seconds)
        tokens = float(sum(t.num_action_tokens for t in trajs))
        denom = timings.get("rollout", sum(timings.values()))
        out["throughput/generated_tokens"] = tokens
        if denom > 0:
            out["throughput/tokens_per_s"] = tokens / denom
    return out
