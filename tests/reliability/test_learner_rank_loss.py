"""Losing a learner rank: with the FSDP2 learner's 2 ranks as Ray actors, rank 1 killed just before RL update 3
(`faults.kill_learner_rank_at_step=3`: `ray.kill`, as a lost node would) stops `tracerl train` with one sentence
and exit 2, the checkpoints of updates 1 and 2 intact; `tracerl train --resume RUN` starts new ranks from the
step-2 checkpoint and ends with the weights of an uninterrupted single-process run (within 1e-5).

    .venv/bin/python -m pytest -q -m slow tests/reliability/test_learner_rank_loss.py
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from safetensors.torch import load_file

pytest.importorskip("ray")

ARGS = ["smoke", "run.threads=1", "rl.steps=3", "stages=[sft,rl]", "rl.checkpoint_every=1", "run.progress=false"]
RAY = ["run.backend=ray", "ray.num_cpus=3", "learner.ranks=2"]


def _tracerl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracerl.cli", "train", *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1"})


@pytest.mark.slow  # three runs, ~76 s on a loaded 2-core machine
@pytest.mark.timeout(900)
def test_killed_learner_rank_stops_the_run_and_resume_ends_where_an_uninterrupted_run_does(tmp_path):
    run = tmp_path / "ray"
    p = _tracerl(*ARGS, *RAY, "faults.kill_learner_rank_at_step=3", f"run.dir={run}")
    assert p.returncode == 2, p.stderr[-3000:]
    said = p.stderr.strip().splitlines()[-1]
    assert said.startswith("tracerl: error: learner rank 1 on node ") and "died during `update`" in said, said
    assert said.endswith("continue it from its last checkpoint with tracerl train --resume RUN_DIR")
    assert "Traceback" not in p.stderr
    done = sorted(d.name for d in (run / "checkpoints").glob("step_*"))
    assert done == ["step_1", "step_2"], done

    p = _tracerl("--resume", str(run), "faults.kill_learner_rank_at_step=null")
    assert p.returncode == 0, p.stderr[-3000:]
    p = _tracerl(*ARGS, f"run.dir={tmp_path / 'local'}")  # uninterrupted, one process
    assert p.returncode == 0, p.stderr[-3000:]
    w_ray = load_file(run / "checkpoints" / "step_3" / "model.safetensors")
    w_one = load_file(tmp_path / "local" / "checkpoints" / "step_3" / "model.safetensors")
    w_two = load_file(run / "checkpoints" / "step_2" / "model.safetensors")
    assert max(float((w_ray[k] - w_one[k]).abs().max()) for k in w_one) < 1e-5
    assert max(float((w_ray[k] - w_two[k]).abs().max()) for k in w_one) > 1e-4  # update 3 moved the weights
