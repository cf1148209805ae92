"""What the report reads from a run's stored episodes: per-environment and per-source series, and
the best and worst trajectory of each RL step with its decoded text.

Series computed here use the same definitions as the training metrics (`telemetry.episodes`):
success is `contract.is_success`, tool calls are `tool_calls`, and infrastructure failures are left out of
reward and success (they never carry reward).
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from pathlib import Path
from typing import Any

from tracerl.eval.report.series import Series

TRAINING_STAGES = ("rl",)


def _stored(run_path: Path, stages: tuple[str, ...]):
    """(stage, step, trajectory) of the given stages, in storage order; nothing when there is no store."""
    if not (run_path / "store.sqlite").exists():
        return
    from tracerl.store import RunDir
    from tracerl.store.export import rows

    run = RunDir(run_path)
    try:
        for stage in stages:
            yield from rows(run, stage=stage)
    except sqlite3.Error:
        return
    finally:
        run.close()


def breakdown_series(run_path: Path) -> Series:
    """`by_env/<env>/reward`, `by_env/<env>/success`, `by_env/<env>/tool_calls_per_episode` and
    `by_source/<source>/success` per RL step, from the stored training episodes."""
    from tracerl.contract import TerminalReason, is_success
    from tracerl.telemetry.episodes import tool_calls

    acc: dict[tuple[str, int], list[float]] = defaultdict(list)
    for _stage, step, t in _stored(run_path, TRAINING_STAGES):
        if t.terminal_reason == TerminalReason.INFRA_FAILURE:
            continue
        ok = float(is_success(t))
        acc[(f"by_env/{t.env_name}/reward", step)].append(t.reward)
        acc[(f"by_env/{t.env_name}/success", step)].append(ok)
        acc[(f"by_env/{t.env_name}/tool_calls_per_episode", step)].append(float(len(tool_calls(t))))
        acc[(f"by_source/{t.task_source or t.env_name}/success", step)].append(ok)
    series: Series = defaultdict(list)
    for (name, step), values in sorted(acc.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        series[("rl", name)].append((step, sum(values) / len(values)))
    return dict(series)


def sample_table(run_path: Path, *, steps: int = 8, chars: int = 240) -> list[dict[str, Any]]:
    """Best and worst trajectory (by reward) of each environment in each of the last `steps` RL steps,
    text decoded; the page filters them by environment, reward and terminal reason."""
    from tracerl.store import RunDir
    from tracerl.store.export import decode_parts, run_tokenizer
    from tracerl.contract import is_success

    by_step: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for _stage, step, t in _stored(run_path, TRAINING_STAGES):
        by_step[step][t.env_name].append(t)
    if not by_step:
        return []
    run = RunDir(run_path)
    tok = run_tokenizer(run)
    run.close()
    out = []
    for step in sorted(by_step)[-steps:]:
        for env in sorted(by_step[step]):
            ranked = sorted(by_step[step][env], key=lambda t: t.reward)
            picks = [("best", ranked[-1])] + ([("worst", ranked[0])] if len(ranked) > 1 else [])
            for which, t in picks:
                _, completion = decode_parts(t, tok)
                text = " ".join(completion.split()) if tok is not None else f"[{t.num_action_tokens} action tokens]"
                out.append({"step": step, "which": which, "env": env, "reward": float(t.reward),
                            "correct": is_success(t), "ending": t.terminal_reason.value if t.terminal_reason else "",
                            "task": t.task_id, "trajectory": t.trajectory_id,
                            "completion": text if len(text) <= chars else text[: chars - 1] + "…"})
    return out
