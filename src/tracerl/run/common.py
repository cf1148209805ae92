"""What the pipeline's parts share (`run/pipeline.py` and its stages): the run result, console
output, the manifest's sandbox entry, the resume point and the final table."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tracerl.config import Recipe
from tracerl.errors import UserError
from tracerl.store import RunDir
from tracerl.train.checkpoint import checkpoint_marks, load_trainer_state


@dataclasses.dataclass
class RunResult:
    run_dir: Path
    evals: list[dict]  # one per eval stage: {"after": stage label, "success": ..., ...}
    wall_s: float


def _say(msg: str) -> None:
    print(msg, flush=True)


def _sandbox_revision() -> dict:
    try:
        import tracerl.sandbox as sb

        report = sb.isolation_report() if hasattr(sb, "isolation_report") else {}
        return {"revision": getattr(sb, "REVISION", "unknown"), "isolation": report}
    except Exception as err:  # a manifest records what it can; the sandbox is checked on use
        return {"revision": None, "error": repr(err)}


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _resume_point(run: RunDir, recipe: Recipe) -> tuple[Path, dict, list[str]]:
    """The latest checkpoint, its trainer state, and the stages still to run from it."""
    ckpt = run.latest_checkpoint(say=_say)
    if ckpt is None:
        raise UserError(f"{run.path} has no complete checkpoint to resume from; start it again with `tracerl train`")
    state = load_trainer_state(ckpt)
    if state.get("stage") != "rl" or "rl" not in recipe.stages:
        raise UserError(f"the latest checkpoint of {run.path} is not inside an RL stage; nothing to resume")
    run.rollback(checkpoint_marks(ckpt))  # what a killed step wrote after this checkpoint goes
    rest = recipe.stages[recipe.stages.index("rl"):]
    if state["step"] >= recipe.rl.steps:
        rest = rest[1:]
    return ckpt, state, rest


def _print_table(result: RunResult, recipe: Recipe) -> None:
    if not result.evals:
        _say(f"done in {result.wall_s:.0f}s; run directory {result.run_dir}")
        return
    ks = [k for k in recipe.eval.k if k <= recipe.eval.samples]
    head = (f"{'after':<8} {'held-out success':>17} " + " ".join(f"{'pass@' + str(k):>8}" for k in ks)
            + f" {'tool calls':>11} {'infra fail':>10}")
    _say("\n" + head + "\n" + "-" * len(head))
    for e in result.evals:
        _say(f"{e['after']:<8} {e['eval/success']:>17.3f} " + " ".join(f"{e[f'eval/pass@{k}']:>8.3f}" for k in ks)
             + f" {e['eval/tool_calls_per_episode']:>11.2f} {e.get('eval/infra_failure_rate', 0.0):>10.3f}")
    _say(f"\ndone in {result.wall_s:.0f}s; run directory {result.run_dir}")
