"""Fault injection (`faults:` in a recipe): tool crashes, hangs, slow calls, garbage output,
environment exceptions and verifier errors, at given rates, for tests and benchmarks.

`wrap_spec(spec, cfg)` returns the environment spec with every env it makes wrapped in
`FaultyEnv`. A wrapped step draws at most one fault from a generator seeded by (faults.seed,
task id, reset seed), so a run's faults are reproducible. Every injected fault, and every
exception the real environment raises, ends the episode as `infra_failure` with
`info["fault"]` naming the kind (stored in the trajectory's verifier_output, so faults are
counted by kind from the store): never rewarded (the agent loop zeroes an infra_failure's
components), never a demonstration (SFT keeps only episodes that ended on their own), and left
out of the group baseline by the trainer. A slow call is not a failure: it costs `slow_s` and the
step goes on; it is counted as `info["fault_slow"]`.

Transient tool errors (`tool_error`) are not infrastructure faults either: with probability p per tool call
(a non-final step whose info names a `tool`), the call's observation is replaced by `TOOL_ERROR` (the text
eval/slices.py's `tool_error` slices use) and the episode goes on, so the policy meets an error it can
recover from (call again, or answer). The call itself runs (a stateful env keeps its side effects); the
step's info gets `fault="tool_error"` and `tool_status="tool_error"` (its span's status: counted by
telemetry as `tool/status_tool_error` and in `tool/error_rate`, never in `rollout/infra_failures`). The
draws come from their own generator, seeded like the others, so adding `tool_error` leaves the other
faults' draws as they were and `tool_error: 0` draws nothing. With `tool_error_scope: task` that generator is
seeded by the task id alone: every episode of a task (a group's members, a later visit) meets the same errors
at the same call numbers.

Engine errors (`engine_error`): `wrap_engine` makes a session's `generate` raise when a row of the
call is drawn to fail (seeded by faults.seed, the row's key and its tokens); the agent loop retries
the rows one by one and ends only the failing row's episode, as `infra_failure` labelled
`engine_error` (rollout/guard.py `generate_rows`).
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
import zlib
from typing import Any

from tracerl.config.faults import KINDS, FaultsConfig
from tracerl.contract.roles import TerminalReason
from tracerl.envs.base import EnvSpec, Step


TOOL_ERROR = "Error: the tool is unavailable."


class InjectedFault(RuntimeError):
    """Raised inside a wrapped step for `env_exception`; caught and labelled like a real one."""


class FaultyEnv:
    """An environment whose steps fail at the configured rates, and whose own exceptions are
    labelled `infra_failure` instead of ending the run."""

    def __init__(self, inner, cfg: FaultsConfig) -> None:
        self.inner, self.cfg = inner, cfg
        self.name, self.revision = inner.name, inner.revision
        self.rng = self.tool_rng = random.Random(0)

    def reset(self, task, seed: int):
        self.rng = random.Random(f"{self.cfg.seed}:{getattr(task, 'id', '')}:{seed}")
        scope = f":{seed}" if self.cfg.tool_error_scope == "episode" else ""  # `task`: a group shares its errors
        self.tool_rng = random.Random(f"{self.cfg.seed}:tool_error:{getattr(task, 'id', '')}{scope}")
        return self.inner.reset(task, seed)

    def state_hash(self) -> str:
        return self.inner.state_hash()

    def _draw(self) -> str | None:
        x, edge = self.rng.random(), 0.0
        for kind in KINDS:
            edge += getattr(self.cfg, kind)
            if x < edge:
                return kind
        return None

    def step(self, action_text: str) -> Step:
        kind = self._draw()
        slow = self.rng.random() < self.cfg.slow_call
        if slow:
            sigma = self.cfg.slow_sigma
            time.sleep(min(600.0, self.cfg.slow_s * (math.exp(sigma * self.rng.gauss(0.0, 1.0)) if sigma else 1.0)))
        try:
            if kind == "tool_hang":
                time.sleep(self.cfg.hang_s)  # the call's own timeout ends it
                return _fault(kind, f"the tool call hung past its {self.cfg.hang_s:g} s timeout")
            if kind == "tool_crash":
                return _fault(kind, "the tool's sandbox crashed (injected)")
            if kind == "env_exception":
                raise InjectedFault("the environment raised (injected)")
            step = self.inner.step(action_text)
        except Exception as exc:  # noqa: BLE001 - an env's exception is an infrastructure fault, not the policy's
            return _fault(kind or "env_exception", f"{type(exc).__name__}: {str(exc)[:200]}")
        if kind == "garbage_output" and step.observation is not None and not step.terminated:
            return _fault(kind, "the tool returned noise instead of its output")
        if kind == "verifier_error" and step.terminated:
            return _fault(kind, "the verifier failed while scoring (injected)")
        if slow:
            step = dataclasses.replace(step, info={**(step.info or {}), "fault_slow": True})
        if (self.cfg.tool_error > 0 and is_tool_call(step) and self.tool_rng.random() < self.cfg.tool_error):
            step = tool_error_step(step)
        return step


def is_tool_call(step: Step) -> bool:
    """A step that answered a tool call with an observation (the episode goes on)."""
    return not step.terminated and step.observation is not None and bool((step.info or {}).get("tool"))


def tool_error_step(step: Step) -> Step:
    """`step` with its observation replaced by the tool's error; the episode goes on."""
    return dataclasses.replace(step, observation=TOOL_ERROR,
                               info={**(step.info or {}), "fault": "tool_error", "tool_status": "tool_error"})


def _fault(kind: str, why: str) -> Step:
    return Step(terminated=True, terminal_reason=TerminalReason.INFRA_FAILURE,
                info={"fault": kind, "tool_status": "crash", "error": why})


def wrap_spec(spec: EnvSpec, cfg: FaultsConfig | None) -> EnvSpec:
    """`spec` itself when no fault is configured; else the same spec making `FaultyEnv`s."""
    if cfg is None or not cfg.active:
        return spec
    make = spec.make

    def make_faulty(*args: Any, **kwargs: Any) -> FaultyEnv:
        return FaultyEnv(make(*args, **kwargs), cfg)

    return dataclasses.replace(spec, make=make_faulty)


class InjectedEngineError(RuntimeError):
    """A session's generate failing for a row (`engine_error`)."""


class FaultySession:
    """A generation session whose `generate` raises when any requested row is drawn to fail."""

    def __init__(self, inner, cfg: FaultsConfig) -> None:
        self.inner, self.cfg = inner, cfg

    def _fails(self, key, seq) -> bool:
        digest = zlib.crc32(",".join(map(str, seq)).encode())
        return random.Random(f"{self.cfg.seed}:engine:{key}:{digest}").random() < self.cfg.engine_error

    def generate(self, keys, sequences, **kw):
        bad = [k for k, seq in zip(keys, sequences) if self._fails(k, seq)]
        if bad:
            raise InjectedEngineError(f"generate failed for rows {bad} (injected)")
        return self.inner.generate(keys, sequences, **kw)


class FaultyEngine:
    """The engine with `engine_error` injected into its sessions; everything else passes through."""

    def __init__(self, inner, cfg: FaultsConfig) -> None:
        self.inner, self.cfg = inner, cfg

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def open_session(self):
        from tracerl.rollout.engine import StatelessSession

        inner = self.inner.open_session() if hasattr(self.inner, "open_session") else StatelessSession(self.inner)
        return FaultySession(inner, self.cfg)


def wrap_engine(engine, cfg: FaultsConfig | None):
    """`engine` itself unless `engine_error` > 0; else a `FaultyEngine` around it."""
    if cfg is None or cfg.engine_error <= 0:
        return engine
    return FaultyEngine(engine, cfg)


def count_faults(trajectories) -> dict[str, int]:
    """Infra-failure episodes by fault kind (`unlabelled` for infra failures of other origin)."""
    counts: dict[str, int] = {}
    for t in trajectories:
        if t.terminal_reason == TerminalReason.INFRA_FAILURE:
            kind = str((t.verifier_output or {}).get("fault", "unlabelled"))
            counts[kind] = counts.get(kind, 0) + 1
    return counts
