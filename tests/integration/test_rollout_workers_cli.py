"""`tracerl train smoke rollout.workers=2` through the real CLI: the sync loop's groups split over 2 spawned
rollout worker processes, the same trajectories as one worker seeded per group, the weight syncs logged."""

import json
import os
import subprocess
import sys

import pytest

TRACERL = [sys.executable, "-m", "tracerl.cli"]


def _train(run_dir, *extra):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.run([*TRACERL, "train", "smoke", f"run.dir={run_dir}", "run.threads=1", "stages=[sft,rl]",
                           *extra], capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _tokens(run_dir):
    from tracerl.store import Store

    with Store(run_dir / "store.sqlite") as store:
        return [(t.group_id, t.token_ids, t.reward) for s in (1, 2) for t in store.trajectories(stage="rl", step=s)]


@pytest.mark.slow  # two smoke runs (SFT included), one with 2 worker processes: about 2 minutes on 2 cores
@pytest.mark.timeout(1800)
def test_smoke_with_two_rollout_workers_samples_what_one_does(tmp_path):
    _train(tmp_path / "one", "rollout.seeding=group")
    proc = _train(tmp_path / "two", "rollout.workers=2")
    assert "rl step   2/2" in proc.stdout
    assert _tokens(tmp_path / "one") == _tokens(tmp_path / "two") and len(_tokens(tmp_path / "two")) == 64
    rows = [json.loads(x) for x in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in rows if m.get("stage") == "rl" and "rollout/workers" in m]
    assert [m["rollout/workers"] for m in steps] == [2.0, 2.0]
    assert steps[1]["rollout/weight_sync_mb"] > 0  # version after step 1 to both workers
    manifest = json.loads((tmp_path / "two" / "manifest.json").read_text())
    assert manifest["backend"]["name"] == "local"
