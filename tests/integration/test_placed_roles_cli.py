"""`tracerl train smoke run.backend=ray placement.<role>.where=ray` for each role that can be placed beside the KL
reference — the MOPD teacher, the learned judge (`roles.grader`, replace mode: it sets the reward), the PPO critic
and PRIME's PRM — ends its 2 RL steps at the weights of the same run with the role in the trainer (bit for bit
on this machine: the same threads, the minibatches drawn by the trainer), and the manifest's `placement` says
the role ran on a Ray actor. Each pair of runs takes 18–50 s here: slow."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

pytest.importorskip("ray")

TRACERL = [sys.executable, "-m", "tracerl.cli"]
RAY = ["run.backend=ray", "ray.num_cpus=2", "run.progress=false"]


def _train(run_dir, *overrides):
    p = subprocess.run([*TRACERL, "train", "smoke", "run.threads=1", f"run.dir={run_dir}", *overrides],
                       capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert p.returncode == 0, p.stderr[-2000:]
    return run_dir


@pytest.fixture(scope="module")
def judge(tmp_path_factory):
    """A smoke run's final checkpoint: the teacher and the judge of the runs below (the same tokenizer)."""
    return _train(tmp_path_factory.mktemp("base")) / "checkpoints" / "step_2"


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("role, overrides", [
    ("teachers", ["rl.algorithm.name=mopd", "roles.teachers=[{name: t, path: JUDGE}]"]),
    ("grader", ["roles.grader.path=JUDGE", "roles.grader.mode=replace", "roles.grader.refuse_uncalibrated=false"]),
    ("critic", ["rl.algorithm.name=ppo"]),
    ("prm", ["rl.algorithm.name=prime"]),
])
def test_a_placed_role_ends_at_the_trainer_runs_weights(judge, tmp_path, role, overrides):
    overrides = [o.replace("JUDGE", str(judge)) for o in overrides]
    here = _train(tmp_path / "here", *RAY, *overrides)
    there = _train(tmp_path / "there", *RAY, *overrides, f"placement.{role}.where=ray")
    a, b = (load_file(r / "checkpoints" / "step_2" / "model.safetensors") for r in (here, there))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    w1 = load_file(here / "checkpoints" / "step_1" / "model.safetensors")
    assert any(not torch.equal(a[k], w1[k]) for k in a)  # step 2 updated the policy
    placed = [json.loads((r / "manifest.json").read_text())["placement"][role] for r in (here, there)]
    assert placed[0] == {"where": "trainer"} and placed[1]["where"] == "ray" and len(placed[1]["workers"]) == 1
    if role == "grader":  # the judge's record (revision, calibration) is the in-process judge's
        grader = [json.loads((r / "manifest.json").read_text())["verifier"]["grader"] for r in (here, there)]
        assert grader[0] == grader[1]
