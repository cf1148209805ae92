"""The one definition of a successful episode (docs/architecture.md, "The trajectory contract").

An episode succeeds when its `correct` reward component (else its `success` component) is 1;
without either component, when its weighted reward is 1. A partial score (one unit test of five,
a 0.8 from a graded verifier) is not a success.

Every caller counts success this way: the held-out tables (`eval/heldout.py`, `eval/record.py`,
`eval/slices.py`), the report's episode rows, telemetry's `reward/success_rate` and
`length/correct_*` / `length/incorrect_*`, `tracerl inspect`, pass-rate profiling, rejection
sampling, the grader's agreement and the per-environment `success` of a multi-environment run.

Changed meaning: telemetry (`telemetry/episodes.py`, the report's episode rows and `tracerl inspect`)
used to count an episode as correct when its `correct` component was above 0.5, else when it ended
in `env_success`, else when its reward was above 0, so a `code_tests` episode passing one test of
five counted as a success. `reward/success_rate` (and the correct / incorrect length split) now
counts an episode only when it fully succeeded, as the held-out numbers always did; the held-out
numbers do not change.
"""

from __future__ import annotations

from tracerl.contract.trajectory import Trajectory


def is_success(traj: Trajectory) -> bool:
    """An episode succeeds when its `correct` (or `success`) component is 1; else full reward."""
    comps = traj.reward_components
    value = comps.get("correct", comps.get("success", traj.reward))
    return value >= 1.0 - 1e-9
