"""`roles.grader` in a real run: the judge grades every rollout, its evidence is stored, and a bad judge path
is one sentence before anything is written."""

import json
import subprocess
import sys

import pytest

from tracerl.config import load_recipe
from tracerl.store import Store
from tracerl.run.pipeline import run_recipe

SMOKE = ["run.threads=1", "sft.epochs=3", "rl.steps=1", "rl.checkpoint_every=0", "eval.tasks=4", "stages=[sft, rl]"]


@pytest.mark.parametrize("mode", [[], ["rl.mode=async", "rl.max_staleness=1"]], ids=["sync", "async"])
def test_replace_mode_rewards_by_the_judge_and_records_it(tmp_path, tiny_dir, mode):
    # async: the judge grades each job's rollouts as they arrive, before staleness and selection
    run_dir = tmp_path / "graded"
    recipe = load_recipe("smoke", SMOKE + mode + [f"run.dir={run_dir}", f"roles.grader={{path: {tiny_dir}, mode: replace, refuse_uncalibrated: false}}"])
    run_recipe(recipe)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    judge = manifest["verifier"]["grader"]
    assert judge["mode"] == "replace" and len(judge["prompt_sha256"]) == 64 and len(judge["model_sha256"]) == 64
    # an untrained judge: calibrated on math_tool's audit set (3 good, 17 wrong), refused unless told not to
    assert judge["calibration"]["n_pos"] == 3 and judge["calibration"]["problem"]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rl = [m for m in rows if m.get("stage") == "rl" and "grader/n" in m]
    assert rl and rl[0]["grader/n"] == 32 and 0.0 <= rl[0]["grader/agreement"] <= 1.0  # 4 prompts x 8
    with Store(run_dir / "store.sqlite") as store:
        trajs = list(store.trajectories(stage="rl"))
    assert trajs and all(t.verifier_name == "learned_grader" and t.verifier_revision == judge["revision"] for t in trajs)
    # the reward trained on is the judge's verdict; the env's own verdict is kept, at weight 0
    assert all(t.reward == t.reward_components["judge"] and t.reward_weights["correct"] == 0.0 for t in trajs)
    assert all(0.0 <= t.verifier_output["judge_p_yes"] <= 1.0 for t in trajs)


def test_a_bad_judge_path_is_one_sentence_and_writes_nothing(tmp_path):
    run_dir = tmp_path / "never"
    proc = subprocess.run([sys.executable, "-m", "tracerl.cli", "train", "smoke", f"run.dir={run_dir}",
                           f"roles.grader.path={tmp_path / 'no-such-judge'}"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "roles.grader.path" in proc.stderr and "Traceback" not in proc.stderr
    assert not run_dir.exists()


def test_an_uncalibrated_judge_is_refused_in_one_sentence(tmp_path, tiny_dir):
    run_dir = tmp_path / "refused"
    proc = subprocess.run([sys.executable, "-m", "tracerl.cli", "train", "smoke", f"run.dir={run_dir}",
                           f"roles.grader.path={tiny_dir}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "roles.grader: the judge" in proc.stderr and "is refused" in proc.stderr
    assert not run_dir.exists()
