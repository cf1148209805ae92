"""Resuming from sharded checkpoints (`learner.checkpoint_format: sharded`, train/shards.py): a 2-rank run whose rank 1
is killed just before RL update 3 (`faults.kill_learner_rank_at_step=3`) stops with exit 2, its step-2 checkpoint
holding each rank's shard; `tracerl train --resume RUN` on 2 ranks, and on a copy with `learner.ranks=1
learner.checkpoint_format=full` (DCP reshards 2 → 1), both end with the weights of an uninterrupted single-process
run within 1e-5 (measured: 2.5e-6, the same as a 2-rank run without a resume). The same kill and 2-rank resume
with the ranks as Ray actors (2.5e-6) and with a LoRA policy (its adapter: 1.3e-7).

    .venv/bin/python -m pytest -q -m slow tests/reliability/test_sharded_resume.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from safetensors.torch import load_file

ARGS = ["smoke", "run.threads=1", "rl.steps=3", "stages=[sft,rl]", "rl.checkpoint_every=1", "run.progress=false"]


def _tracerl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracerl.cli", "train", *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _diff(a, b) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.mark.slow  # three runs each, ~75 s on an idle 2-core machine
@pytest.mark.timeout(900)
@pytest.mark.parametrize("extra,weights", [
    (["run.backend=ray", "ray.num_cpus=3"], "model.safetensors"),
    (["model.lora.r=4", "rl.algorithm.kl.coef=0.05"], "adapter_model.safetensors"),
], ids=["ray", "lora"])
def test_sharded_checkpoint_resumes_ray_and_lora(tmp_path, extra, weights):
    pytest.importorskip("ray" if "run.backend=ray" in extra else "peft")
    run = tmp_path / "two"
    p = _tracerl(*ARGS, *extra, "learner.ranks=2", "learner.checkpoint_format=sharded",
                 "faults.kill_learner_rank_at_step=3", f"run.dir={run}")
    assert p.returncode == 2 and "died during `update`" in p.stderr, p.stderr[-3000:]
    assert len(list((run / "checkpoints" / "step_2" / "policy_shards").glob("shard-*.safetensors"))) == 2
    p = _tracerl("--resume", str(run), "faults.kill_learner_rank_at_step=null")
    assert p.returncode == 0, p.stderr[-3000:]
    p = _tracerl(*ARGS, *[e for e in extra if not e.startswith(("run.backend", "ray."))], f"run.dir={tmp_path / 'one'}")
    assert p.returncode == 0, p.stderr[-3000:]
    w_one = load_file(tmp_path / "one" / "checkpoints" / "step_3" / weights)
    assert _diff(load_file(run / "checkpoints" / "step_3" / weights), w_one) < 1e-5
    assert _diff(load_file(run / "checkpoints" / "step_2" / weights), w_one) > 1e-5  # update 3 moved them


@pytest.mark.slow  # four runs, ~70 s on an idle 2-core machine
@pytest.mark.timeout(900)
def test_sharded_checkpoint_resumes_on_two_ranks_and_on_one(tmp_path):
    run, copy = tmp_path / "two", tmp_path / "two_then_one"
    p = _tracerl(*ARGS, "learner.ranks=2", "learner.checkpoint_format=sharded", "faults.kill_learner_rank_at_step=3",
                 f"run.dir={run}")
    assert p.returncode == 2 and "died during `update`" in p.stderr, p.stderr[-3000:]
    assert sorted(d.name for d in (run / "checkpoints").glob("step_*")) == ["step_1", "step_2"]
    assert len(list((run / "checkpoints" / "step_2" / "policy_shards").glob("shard-*.safetensors"))) == 2
    shutil.copytree(run, copy)

    p = _tracerl("--resume", str(run), "faults.kill_learner_rank_at_step=null")
    assert p.returncode == 0, p.stderr[-3000:]
    p = _tracerl("--resume", str(copy), "faults.kill_learner_rank_at_step=null", "learner.ranks=1",
                 "learner.checkpoint_format=full")
    assert p.returncode == 0, p.stderr[-3000:]
    p = _tracerl(*ARGS, f"run.dir={tmp_path / 'one'}")  # uninterrupted, one process
    assert p.returncode == 0, p.stderr[-3000:]

    w_one = load_file(tmp_path / "one" / "checkpoints" / "step_3" / "model.safetensors")
    w_two = load_file(run / "checkpoints" / "step_3" / "model.safetensors")
    w_2to1 = load_file(copy / "checkpoints" / "step_3" / "model.safetensors")
    assert _diff(w_two, w_one) < 1e-5 and _diff(w_2to1, w_one) < 1e-5
    w_before = load_file(run / "checkpoints" / "step_2" / "model.safetensors")
    assert _diff(w_before, w_one) > 1e-4  # update 3 moved the weights far more than the tolerance
    assert (run / "checkpoints" / "step_3" / "policy_shards").is_dir()  # the resumed 2-rank run still writes shards
    assert not (copy / "checkpoints" / "step_3" / "policy_shards").exists()  # the 1-rank one writes the full state
