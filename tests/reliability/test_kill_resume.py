"""kill -9 the training process again and again; every resume succeeds and nothing is lost or doubled.

The smoke recipe (6 RL steps, a checkpoint after each) runs once uninterrupted, then again under
at least 10 SIGKILLs at random moments, some timed to land while a checkpoint is being written
(a `.tmp-step_*` folder exists) or right after a step's store write (the WAL grew). After each
kill the run is resumed with `tracerl train --resume`; a kill before the first checkpoint leaves
nothing to resume and the run is started again. At the end the final
weights equal the uninterrupted run's bit for bit, every RL step's trajectories are stored exactly
once (the same token ids as the uninterrupted run), every metric of every step once, and
`PRAGMA integrity_check` is ok.

    .venv/bin/python -m pytest -q -m slow tests/reliability/test_kill_resume.py
"""

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tracerl.store import RunDir

pytestmark = pytest.mark.slow

STEPS = 6
KILLS = 10
ARGS = ["smoke", "run.threads=1", f"rl.steps={STEPS}", "rl.checkpoint_every=1"]
TRACERL = [sys.executable, "-m", "tracerl.cli"]


def _start(run_dir: Path, resume: bool) -> subprocess.Popen:
    cmd = TRACERL + (["train", "--resume", str(run_dir)] if resume else ["train", *ARGS, f"run.dir={run_dir}"])
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _wait_for_moment(proc: subprocess.Popen, run_dir: Path, mode: str, rng: random.Random) -> None:
    """Return at the moment to kill: after a random delay, when a checkpoint write is under way,
    or just after the store's WAL grew (a step's trajectories or metrics were written)."""
    while proc.poll() is None and not list(run_dir.glob("checkpoints/step_*/MANIFEST.json")):
        time.sleep(0.05)  # a fresh run: first let it reach its first checkpoint
    deadline = time.monotonic() + (15.0 if mode == "checkpoint" else rng.uniform(0.5, 8.0))
    wal = run_dir / "store.sqlite-wal"
    size0 = wal.stat().st_size if wal.exists() else 0
    while proc.poll() is None and time.monotonic() < deadline:
        if mode == "checkpoint" and any(p.name.startswith(".tmp-") for p in (run_dir / "checkpoints").glob(".tmp-*")):
            return
        if mode == "store" and wal.exists() and wal.stat().st_size > size0 and (run_dir / "checkpoints").exists():
            return
        time.sleep(0.002 if mode != "random" else 0.02)


def _final_weights(run_dir: Path) -> dict:
    return load_file(str(run_dir / "checkpoints" / f"step_{STEPS}" / "model.safetensors"))


def test_kill_minus_nine_loses_and_doubles_nothing(tmp_path):
    ref_dir, run_dir = tmp_path / "ref", tmp_path / "killed"
    done = subprocess.run(TRACERL + ["train", *ARGS, f"run.dir={ref_dir}"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr

    rng = random.Random(17)
    kills, resumes, restarts, log = 0, 0, 0, []
    proc = _start(run_dir, resume=False)
    while True:
        if kills < KILLS:
            mode = "early" if kills == 0 else ["random", "checkpoint", "store"][kills % 3]
            if mode == "early":  # while the tiny model is built or SFT runs: nothing to resume yet
                time.sleep(2.0)
            else:
                _wait_for_moment(proc, run_dir, mode, rng)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills += 1
                log.append(mode)
        out = proc.communicate()[0]
        if proc.returncode == 0:
            break
        assert proc.returncode == -signal.SIGKILL, out[-2000:]  # never a traceback, never exit 2
        resumable = (run_dir / "store.sqlite").exists() and RunDir(run_dir).latest_checkpoint(say=lambda m: None)
        if not resumable:  # killed before the first checkpoint: start again
            shutil.rmtree(run_dir, ignore_errors=True)
            restarts += 1
            proc = _start(run_dir, resume=False)
        else:
            resumes += 1
            proc = _start(run_dir, resume=True)
    print(f"kills {kills} ({', '.join(log)}), resumes {resumes}, restarts before a first checkpoint {restarts}")
    assert kills >= KILLS and resumes >= 5, (kills, resumes, restarts, log)

    ref_w, got_w = _final_weights(ref_dir), _final_weights(run_dir)
    assert ref_w.keys() == got_w.keys()
    assert all(bool((ref_w[k] == got_w[k]).all()) for k in ref_w)  # bit for bit

    ref, got = RunDir(ref_dir), RunDir(run_dir)
    try:
        assert got.store.integrity() == "ok"
        per_step = lambda run: Counter((t.task_id, tuple(t.token_ids)) for t in run.store.trajectories(stage="rl"))  # noqa: E731
        steps = lambda run: Counter(  # noqa: E731
            row[0] for row in run.store._db.execute("SELECT step FROM trajectories WHERE stage = 'rl'"))
        assert steps(got) == steps(ref) and len(steps(got)) == STEPS  # each step's trajectories exactly once
        assert per_step(got) == per_step(ref)
        metric_keys = lambda run: Counter((m["stage"], m["step"], m["name"]) for m in run.store.metrics(stage="rl"))  # noqa: E731
        assert metric_keys(got) == metric_keys(ref) and max(metric_keys(got).values()) == 1
        jsonl = Counter((m["stage"], m["step"]) for m in got.read_metrics() if m["stage"] == "rl")
        assert set(jsonl.values()) == {1}
    finally:
        ref.close()
        got.close()
