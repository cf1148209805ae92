"""Same seed, same weights at the default thread count (run.threads=2): two runs give bit-identical
checkpoints. On the main of 2026-12-05 two SFT passes of one seed differed by ~1e-7: the backward of
the shared-prefix cache gather (train/shared_prefix.py: an index with repeated rows) accumulated in
thread order. `run.deterministic` (default on) turns on torch's deterministic algorithms for CPU runs."""

import hashlib
import subprocess
import sys

from tracerl.config import load_recipe

CMD = [sys.executable, "-m", "tracerl.cli", "train", "smoke", "rl.steps=1", "stages=[sft,rl]", "sft.epochs=4"]


def _weights_sha(run_dir) -> str:
    (ckpt,) = sorted((run_dir / "checkpoints").glob("step_*"))
    return hashlib.sha256((ckpt / "model.safetensors").read_bytes()).hexdigest()


def test_two_runs_at_the_default_threads_give_identical_weights(tmp_path):
    recipe = load_recipe("smoke")
    assert recipe.run.threads == 2 and recipe.run.deterministic  # the defaults this test is about
    shas = []
    for name in ("a", "b"):
        subprocess.run([*CMD, f"run.dir={tmp_path / name}"], check=True, capture_output=True, timeout=300)
        shas.append(_weights_sha(tmp_path / name))
    assert shas[0] == shas[1]

