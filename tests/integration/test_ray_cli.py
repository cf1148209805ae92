"""`tracerl train smoke run.backend=ray` through the real CLI (its own local Ray runtime): the same run
directory shape, manifest keys, store tables, trajectories and metrics as the local run at the same seed."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from ray_vs_local import compare  # noqa: E402

TRACERL = [sys.executable, "-m", "tracerl.cli"]


def _train(run_dir, *extra):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run([*TRACERL, "train", "smoke", f"run.dir={run_dir}", "run.threads=1", *extra],
                          capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_smoke_on_ray_equals_local(tmp_path, mode):
    extra = ["rl.mode=async", "rl.max_staleness=0"] if mode == "async" else []
    _train(tmp_path / "local", *extra)
    proc = _train(tmp_path / "ray", "run.backend=ray", *extra)
    assert "rl step   2/2" in proc.stdout
    manifest = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    assert manifest["backend"]["name"] == "ray" and manifest["backend"]["cluster"]["CPU"] == 2.0
    assert json.loads((tmp_path / "local" / "manifest.json").read_text())["backend"] == {"name": "local"}
    # async at η = 0 with one worker: rollouts on a Ray actor or a spawned process draw the same tokens
    assert compare(tmp_path / "local", tmp_path / "ray") == []


@pytest.mark.slow  # ~25 s; LoRA on Ray stays in the default suite through test_combinations' lora + ray rows
@pytest.mark.timeout(600)
def test_a_lora_run_on_ray_samples_the_merged_policy(tmp_path):
    """`run.backend=ray model.lora.r=8`: the actor rebuilds the plain model and loads the merged weights, so it draws
    every token the local LoRA run draws; behavior log-probs agree to float error (merged W + s·BA against peft's
    unmerged W x + s·B(A x))."""
    pytest.importorskip("ray")
    pytest.importorskip("peft")
    import numpy as np
    from ray_vs_local import TRAJ, trajectories

    _train(tmp_path / "local", "model.lora.r=8")
    proc = _train(tmp_path / "ray", "run.backend=ray", "model.lora.r=8")
    assert "rl step   2/2" in proc.stdout
    cols = [c.strip() for c in TRAJ.split(",")]
    lp = cols.index("behavior_logprobs")
    a, b = trajectories(tmp_path / "local"), trajectories(tmp_path / "ray")
    assert len(a) == len(b) > 0
    for x, y in zip(a, b):
        assert x[:lp] + x[lp + 1:] == y[:lp] + y[lp + 1:]  # tokens, rewards, spans
        u, v = np.frombuffer(x[lp], "<f8"), np.frombuffer(y[lp], "<f8")
        assert np.array_equal(np.isnan(u), np.isnan(v)) and np.nan_to_num(np.abs(u - v)).max() < 1e-5
