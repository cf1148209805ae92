"""`tracerl train smoke learner.ranks=2` end to end through the real CLI: the 2-rank FSDP2 learner
ends the run with the single-process run's weights and metrics (slow: two full smoke runs)."""

import json
import os
import subprocess
import sys

import pytest
from safetensors.torch import load_file

TRACERL = [sys.executable, "-m", "tracerl.cli"]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_smoke_two_ranks_matches_one(tmp_path):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for ranks in (1, 2):
        p = subprocess.run([*TRACERL, "train", "smoke", "run.threads=1", f"learner.ranks={ranks}",
                            f"run.dir={tmp_path / f'r{ranks}'}"], capture_output=True, text=True, timeout=1100, env=env)
        assert p.returncode == 0, p.stderr[-2000:]
    w = [load_file(tmp_path / f"r{r}" / "checkpoints" / "step_2" / "model.safetensors") for r in (1, 2)]
    assert max(float((w[0][k] - w[1][k]).abs().max()) for k in w[0]) < 1e-5
    m = [[json.loads(line) for line in open(tmp_path / f"r{r}" / "metrics.jsonl")] for r in (1, 2)]
    rl = [[x for x in runs if "policy/loss" in x] for runs in m]
    assert len(rl[0]) == len(rl[1]) == 2
    for a, b in zip(*rl):
        assert b["reward/mean"] == a["reward/mean"]
        assert b["policy/loss"] == pytest.approx(a["policy/loss"], rel=1e-4, abs=1e-6)
        assert b["policy/grad_norm"] == pytest.approx(a["policy/grad_norm"], rel=1e-4)
