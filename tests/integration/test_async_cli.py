"""`tracerl train smoke rl.mode=async` end to end through the real CLI, and a resume of an async run."""

import json
import os
import sqlite3
import subprocess
import sys

import pytest

TRACERL = [sys.executable, "-m", "tracerl.cli"]


def _run(*args, timeout=400):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([*TRACERL, *args], capture_output=True, text=True, timeout=timeout, env=env)


def _steps(run_dir, stage="rl"):
    with sqlite3.connect(run_dir / "store.sqlite") as db:
        return sorted({s for (s,) in db.execute("SELECT step FROM trajectories WHERE stage = ?", (stage,))})


@pytest.mark.timeout(900)  # two CLI runs, each spawning a rollout worker
@pytest.mark.slow  # ~23 s; async resume with jobs in flight is in the default suite (tests/reliability/test_async_resume.py)
@pytest.mark.parametrize("eta", [1, pytest.param(4, marks=pytest.mark.slow)])
def test_async_smoke_runs_and_resumes(tmp_path, eta):
    run_dir = tmp_path / "run"
    args = ["train", "smoke", f"run.dir={run_dir}", "run.threads=1", "rl.mode=async", f"rl.max_staleness={eta}",
            "rl.steps=3", "rl.checkpoint_every=1"]
    proc = _run(*args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rl step   3/3" in proc.stdout and "lag " in proc.stdout
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r["stage"] == "rl" and "async/staleness/mean" in r]
    assert len(rl) == 3 and all(r["async/staleness/max"] <= eta for r in rl)
    assert all(0 < r["async/ess_frac"] <= 1 for r in rl[1:])
    assert _steps(run_dir) == [1, 2, 3]
    resumed = _run("train", "--resume", str(run_dir), "rl.steps=4")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "rl step   4/4" in resumed.stdout
    assert _steps(run_dir) == [1, 2, 3, 4]
