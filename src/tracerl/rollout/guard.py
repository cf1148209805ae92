"""What keeps one bad call from stalling or ending a rollout: a watchdog that names the stuck
component, generation that survives rows whose `generate` fails, and the retry rule.

* `Watchdog(budget_s)`: each phase of a turn (the engine's generate, the env steps) runs under
  `with wd.phase(describe)`; a phase still running after `budget_s` is reported once, by name
  (`engine.generate of 12 rows`, `env.step of episode 3 (task m-12)`), through `report`
  (stderr by default) and kept in `wd.reports`. It does not interrupt anything: env steps have
  their own per-call timeout (`step_timeout_s`); a stuck engine call can only be named.
* `generate_rows`: one batched call; if it raises, each row is retried alone and a row that still
  raises comes back as its exception, so the loop ends only that episode (`infra_failure`,
  `engine_error`). Sessions key their caches by row and check the cached prefix, so a failed
  batched call leaves no row with a wrong cache.
* `infra_reason(traj)`: the short reason recorded in a retried episode's lineage.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Watchdog:
    def __init__(self, budget_s: float | None, report: Callable[[str], None] | None = None):
        self.budget_s = budget_s
        self.report = report or _stderr
        self.reports: list[str] = []

    @contextmanager
    def phase(self, describe: str | Callable[[], str]):
        if self.budget_s is None:
            yield
            return
        t0 = time.monotonic()

        def fire() -> None:
            what = describe() if callable(describe) else describe
            msg = (f"watchdog: {what} has run {time.monotonic() - t0:.1f} s, past its {self.budget_s:g} s budget "
                   "(env.step_timeout_s ends a stuck tool call; a stuck engine call is only reported)")
            self.reports.append(msg)
            self.report(msg)

        timer = threading.Timer(self.budget_s, fire)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()


def generate_rows(session, keys: list, sequences: list, *, max_new_tokens: list[int], **kw) -> list:
    """Samples in row order; a row whose generate fails even alone comes back as its exception."""
    try:
        return session.generate(keys, sequences, max_new_tokens=max_new_tokens, **kw)
    except Exception:  # noqa: BLE001 - find the rows that fail; the others go on
        if len(keys) == 1:
            return [sys.exc_info()[1]]
    out = []
    rows = kw.pop("generator", None)
    for i, (key, seq, room) in enumerate(zip(keys, sequences, max_new_tokens)):
        gen = rows.select([i]) if hasattr(rows, "select") else rows  # rollout.seeding: group: the row's own
        try:
            out.append(session.generate([key], [seq], max_new_tokens=[room], generator=gen, **kw)[0])
        except Exception as err:  # noqa: BLE001 - this row's failure ends this row's episode only
            out.append(err)
    return out


def infra_reason(traj) -> str:
    """Why an episode was an infrastructure failure, in a few words (its fault kind when labelled)."""
    out = traj.verifier_output or {}
    return str(out.get("fault") or out.get("infra") or out.get("error") or "infra_failure")[:120]
