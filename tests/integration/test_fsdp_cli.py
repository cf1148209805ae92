"""`tracerl train smoke learner.ranks=2` end to end through the real CLI: the 2-rank FSDP2 learner ends
the run with the single-process run's weights and metrics, also with `learner.checkpoint_format=sharded`
(default: three smoke runs, ~45 s on an idle 2-core machine); and, slow, that the algorithms with auxiliary roles (ppo's critic, prime's PRM, mopd's
teacher), rl.mode async and a LoRA policy run with two ranks."""

import json
import os
import subprocess
import sys

import pytest
from safetensors.torch import load_file

TRACERL = [sys.executable, "-m", "tracerl.cli"]


def _train(run_dir, *overrides, timeout=600):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.run([*TRACERL, "train", "smoke", "run.threads=1", f"run.dir={run_dir}", *overrides],
                       capture_output=True, text=True, timeout=timeout, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    return run_dir


def _rl_metrics(run_dir) -> list[dict]:
    return [m for m in map(json.loads, open(run_dir / "metrics.jsonl")) if "policy/loss" in m]


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    """The 1-rank smoke run (its step_2 checkpoint is also the mopd runs' teacher)."""
    return _train(tmp_path_factory.mktemp("r1"))


@pytest.mark.timeout(600)
def test_smoke_two_ranks_matches_one(one_rank, tmp_path):
    two = _train(tmp_path / "r2", "learner.ranks=2")
    for step in (1, 2):
        w = [load_file(r / "checkpoints" / f"step_{step}" / "model.safetensors") for r in (one_rank, two)]
        assert max(float((w[0][k] - w[1][k]).abs().max()) for k in w[0]) < 1e-5  # measured: 2.5e-6
    rl = [_rl_metrics(r) for r in (one_rank, two)]
    assert len(rl[0]) == len(rl[1]) == 2
    for a, b in zip(*rl):
        assert b["reward/mean"] == a["reward/mean"]
        assert b["policy/loss"] == pytest.approx(a["policy/loss"], rel=1e-4, abs=1e-6)
        assert b["policy/grad_norm"] == pytest.approx(a["policy/grad_norm"], rel=1e-4)


@pytest.mark.timeout(600)
def test_smoke_two_ranks_sharded_checkpoints(one_rank, tmp_path):
    # learner.checkpoint_format=sharded: each rank's shard in policy_shards/, the same weights as the 1-rank run
    two = _train(tmp_path / "r2", "learner.ranks=2", "learner.checkpoint_format=sharded")
    ckpt = two / "checkpoints" / "step_2"
    w = [load_file(r / "checkpoints" / "step_2" / "model.safetensors") for r in (one_rank, two)]
    assert max(float((w[0][k] - w[1][k]).abs().max()) for k in w[0]) < 1e-5
    manifest = json.loads((ckpt / "MANIFEST.json").read_text())
    assert manifest["policy_state"] == {"format": "sharded", "world": 2, "dir": "policy_shards",
                                        "storage": "dcp-safetensors"}
    assert sorted(f for f in manifest["files"] if f.startswith("policy_shards/")) == [
        f"policy_shards/shard-0000{r}-model-00001-of-00001.safetensors" for r in (1, 2)]
    state = json.loads((ckpt / "trainer_state.json").read_text())  # the moments are in the shards only
    assert "exp_avg" not in json.dumps(state["state"]["roles_state"]["policy"])


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("overrides", [
    ["rl.algorithm.name=ppo"], ["rl.algorithm.name=prime"], ["rl.algorithm.name=mopd"], ["rl.mode=async"],
    ["model.lora.r=4", "rl.algorithm.kl.coef=0.05"],
], ids=["ppo", "prime", "mopd", "async", "lora"])
def test_two_ranks_run_every_mode(one_rank, tmp_path, overrides):
    if "model.lora.r=4" in overrides:
        pytest.importorskip("peft")
    if "rl.algorithm.name=mopd" in overrides:
        overrides = [*overrides, f"roles.teachers=[{{name: t, path: {one_rank / 'checkpoints' / 'step_2'}}}]"]
    run = _train(tmp_path / "r2", "learner.ranks=2", *overrides)
    rl = _rl_metrics(run)
    assert len(rl) == 2 and all(m["policy/updates"] == 2.0 for m in rl)
    assert (run / "checkpoints" / "step_2").is_dir()
