"""Held-out evaluation slices under tool faults (`eval.slices`), reported beside the clean evaluation.

The clean held-out evaluation runs the environment as it is (training-time `faults:` never reach
it), under the frozen protocol. Each slice replays the same tasks, samples and seed with one thing
changed, so its numbers differ from the clean ones only by what the slice changes:

* `tool_error`: every tool observation is replaced by an error message (the tool is down: the only
  recovery is to answer without it);
* `tool_error_once`: the first tool call of each episode returns that error, later calls work (a
  transient error: the policy recovers by calling again; what `faults.tool_error` trains on);
* `tool_wrong`: every integer in a tool observation is off by one (plausible but wrong content);
* `faults`: the recipe's `faults:` rates (crash, hang, garbage, env exception, verifier error,
  engine error) are injected as in training; infra episodes are counted, never solved.

From the clean run itself, `used_tool` / `no_tool` split the episodes by whether the policy
called a tool (the slices where the tool was useful or unnecessary, as the policy judged it).
Metrics: `eval/slice/<name>/success` (+ infra_failure_rate, tool_calls_per_episode) and
`eval/slice/<used_tool|no_tool>/{success,episodes}`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from tracerl.envs.base import EnvSpec, Step
from tracerl.config.faults import FaultsConfig
from tracerl.rollout.faults import TOOL_ERROR, is_tool_call, wrap_engine, wrap_spec

SLICES = ("tool_error", "tool_error_once", "tool_wrong", "faults")
_INT = re.compile(r"(?<![\w.])-?\d+(?![\w.])")


def _perturb(text: str) -> str:
    return _INT.sub(lambda m: str(int(m.group()) + 1), text)


class SliceEnv:
    """An env whose tool observations are changed by the slice; rewards are the env's own."""

    def __init__(self, inner, kind: str) -> None:
        self.inner, self.kind = inner, kind
        self.name, self.revision = inner.name, inner.revision
        self.calls = 0

    def reset(self, task, seed: int):
        self.calls = 0
        return self.inner.reset(task, seed)

    def state_hash(self) -> str:
        return self.inner.state_hash()

    def step(self, action_text: str) -> Step:
        step = self.inner.step(action_text)
        if not is_tool_call(step):
            return step
        self.calls += 1
        if self.kind == "tool_error_once" and self.calls > 1:
            return step
        obs = TOOL_ERROR if self.kind in ("tool_error", "tool_error_once") else _perturb(step.observation)
        return dataclasses.replace(step, observation=obs, info={**step.info, "eval_slice": self.kind})


def slice_spec(spec: EnvSpec, kind: str, faults: FaultsConfig | None = None) -> EnvSpec:
    if kind == "faults":
        return wrap_spec(spec, faults)
    make = spec.make
    return dataclasses.replace(spec, make=lambda *a, **k: SliceEnv(make(*a, **k), kind))


def tool_use_split(trajectories) -> dict[str, float]:
    from tracerl.contract import is_success
    from tracerl.telemetry.episodes import tool_calls

    out: dict[str, float] = {}
    for name, keep in (("used_tool", True), ("no_tool", False)):
        ts = [t for t in trajectories if bool(tool_calls(t)) == keep]
        out[f"eval/slice/{name}/episodes"] = float(len(ts))
        out[f"eval/slice/{name}/success"] = sum(map(is_success, ts)) / len(ts) if ts else float("nan")
    return out


def run_slices(run_heldout, engine, spec: EnvSpec, tasks, kinds: list[str], faults: FaultsConfig,
               clean_trajectories, **kw: Any) -> dict[str, float]:
    """Metrics of every slice in `kinds` (same tasks, samples and seed as the clean run) plus the tool-use split."""
    out = tool_use_split(clean_trajectories)
    for kind in kinds:
        eng = wrap_engine(engine, faults) if kind == "faults" else engine
        res = run_heldout(eng, slice_spec(spec, kind, faults), tasks, **kw)
        m = res.metrics(prefix=f"eval/slice/{kind}")
        out.update({k: v for k, v in m.items() if not k.endswith("/wall_s")})
    return out


def report_slices(run, step: int, recipe, run_heldout, engine, spec: EnvSpec, tasks, clean_trajectories, frozen: dict,
                  *, say, protocol: str, env: str | None = None) -> dict[str, float]:
    """Run the recipe's slices, log them (stage eval) and print one line per slice; returns the metrics
    (`eval/slice/*`, or `eval/<env>/slice/*` for one environment of an `envs:` run). They are logged with
    the clean evaluation's protocol column beside them (`eval/protocol`, `eval/<env>/protocol`), as
    eval/record.py logs the clean numbers: a slice replays that protocol with one thing changed."""
    m = run_slices(run_heldout, engine, spec, tasks, list(recipe.eval.slices), recipe.faults, clean_trajectories, **frozen)
    parts = [f"{k}: {m[f'eval/slice/{k}/success']:.3f}" + (f" (infra {m['eval/slice/faults/infra_failure_rate']:.3f})"
                                                         if k == "faults" else "") for k in recipe.eval.slices]
    parts += [f"{k}: {m[f'eval/slice/{k}/success']:.3f} of {int(m[f'eval/slice/{k}/episodes'])}" for k in ("used_tool", "no_tool")]
    if env is not None:
        m = {k.replace("eval/", f"eval/{env}/", 1): v for k, v in m.items()}
    prefix = f"eval/{env}" if env is not None else "eval"
    run.log_metrics(m, stage="eval", step=step, tags={f"{prefix}/protocol": protocol})
    say(f"eval slices{f' ({env})' if env else ''}: " + ", ".join(parts))
    return m
