"""A Bradley–Terry reward model (train/reward_model.py): the loss by hand, training from preference pairs through
`tracerl reward-model`, calibration on math_tool's audit set (refused when it cannot separate), and 2 RL steps
with its σ(score) as the `reward_model` component, the calibration in the manifest and the store."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from tracerl.cli import main
from tracerl.config import load_recipe
from tracerl.errors import UserError
from tracerl.run.pipeline import run_recipe
from tracerl.store import Store
from tracerl.train.reward_model import bt_loss, load_reward_model, read_pairs
from tracerl.verifiers.calibration import INJECTIONS

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "reward_model" / "make_prefs.py"
SMOKE = ["run.threads=1", "sft.epochs=3", "rl.steps=2", "rl.checkpoint_every=0", "eval.tasks=4", "stages=[sft, rl]"]


def test_bradley_terry_loss_by_hand():
    chosen = torch.tensor([2.0, 0.0], requires_grad=True)
    rejected = torch.tensor([0.0, 0.0], requires_grad=True)
    loss = bt_loss(chosen, rejected)
    # mean(-log σ(2 - 0), -log σ(0)) = (log(1 + e^-2) + log 2) / 2 = (0.126928 + 0.693147) / 2
    assert float(loss.detach()) == pytest.approx((math.log(1 + math.exp(-2)) + math.log(2)) / 2) == pytest.approx(0.4100378)
    loss.backward()
    # d/d r_chosen_i = -σ(r_rejected_i - r_chosen_i) / N: -σ(-2) / 2 = -0.0596015, -σ(0) / 2 = -0.25
    assert chosen.grad.tolist() == pytest.approx([-0.0596015, -0.25], abs=1e-6)
    assert rejected.grad.tolist() == pytest.approx([0.0596015, 0.25], abs=1e-6)
    # a large margin is finite (softplus form), and swapping the pair flips the sign of the margin term
    assert float(bt_loss(torch.tensor([0.0]), torch.tensor([200.0]))) == pytest.approx(200.0)


@pytest.mark.parametrize("line, message", [("not json", "line 1 is not JSON"),
                                           ('{"prompt": "q", "chosen": "a"}', "line 1 needs string fields"),
                                           ('{"prompt": "q", "chosen": "a", "rejected": "a"}', "same chosen and rejected")])
def test_bad_preference_rows_are_one_sentence(tmp_path, line, message):
    (tmp_path / "p.jsonl").write_text(line + "\n")
    with pytest.raises(UserError, match=message):
        read_pairs(tmp_path / "p.jsonl")


def _math_tool_prefs(path, *, flip=False, tasks=2):
    """examples/reward_model/make_prefs.py: math_tool's audit families on 2 training tasks (not the audit task)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_prefs", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.math_tool_prefs(path, flip=flip, tasks=tasks)


@pytest.fixture(scope="module")
def reward_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("rm")
    n = _math_tool_prefs(root / "prefs.jsonl")
    assert n == 2 * 34  # 2 tasks x (17 wrong forms + each with an injection)
    assert main(["reward-model", str(root / "prefs.jsonl"), "--out", str(root / "rm"), "--epochs", "2",
                 "--batch-size", "32"]) == 0
    _math_tool_prefs(root / "flipped.jsonl", flip=True)
    assert main(["reward-model", str(root / "flipped.jsonl"), "--out", str(root / "flipped"), "--epochs", "1",
                 "--batch-size", "32"]) == 0
    return root


def test_training_writes_a_loadable_model_that_prefers_the_chosen(reward_models):
    rm, meta = load_reward_model(reward_models / "rm")
    assert meta["kind"] == "bradley_terry" and meta["pairs"] == 68 and meta["epochs"] == 2
    assert meta["pair_accuracy"] > 0.9 and meta["final_loss"] < math.log(2)  # below the loss of a constant score
    rows = read_pairs(reward_models / "prefs.jsonl")[:20]
    c, r = rm.score([(q, a) for q, a, _ in rows]), rm.score([(q, b) for q, _, b in rows])
    assert sum(x > y for x, y in zip(c, r)) >= 18
    # the same folder loads to the same scores (safetensors head, HF backbone): no code runs on load
    again, _ = load_reward_model(reward_models / "rm")
    assert again.score([(q, a) for q, a, _ in rows]) == pytest.approx(c, abs=1e-6)


def test_a_reward_model_that_cannot_separate_the_audit_set_is_refused(reward_models, tmp_path, capsys):
    run_dir = tmp_path / "refused"
    argv = ["train", "smoke", *SMOKE, f"run.dir={run_dir}",
            "roles.reward_model={path: " + str(reward_models / "flipped") + "}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "roles.reward_model: the reward model" in err and "is refused: its AUROC on the audit set is" in err
    assert not run_dir.exists()  # nothing written


@pytest.mark.parametrize("mode", ["sync", pytest.param("async", marks=pytest.mark.slow)])  # async: a spawned worker
def test_a_calibrated_reward_model_scores_two_rl_steps(reward_models, tmp_path, mode):
    run_dir = tmp_path / "rm_run"
    extra = ["rl.mode=async", "rl.max_staleness=1"] if mode == "async" else []
    recipe = load_recipe("smoke", SMOKE + extra + [f"run.dir={run_dir}",
                                           "roles.reward_model={path: " + str(reward_models / "rm") + ", weight: 0.5}"])
    run_recipe(recipe)
    entry = json.loads((run_dir / "manifest.json").read_text())["verifier"]["reward_model"]
    cal = entry["calibration"]
    # math_tool's audit set: 3 good and 17 wrong outputs, each wrong one again with the 4 injections
    assert (cal["n_pos"], cal["n_neg"], cal["n_injected"]) == (3, 17, 17 * len(INJECTIONS))
    assert cal["problem"] == "" and cal["auroc"] >= 0.75 and cal["balanced_accuracy"] >= 0.7
    assert entry["weight"] == 0.5 and entry["train"]["pairs"] == 68 and len(entry["sha256"]) == 64
    with Store(run_dir / "store.sqlite") as store:
        trajs = [t for s in (1, 2) for t in store.trajectories(stage="rl", step=s)]
    assert trajs
    for t in trajs:
        if not t.trainable:
            continue
        rm = t.reward_components["reward_model"]
        assert 0.0 < rm < 1.0 and t.reward_weights["reward_model"] == 0.5
        assert rm == pytest.approx(1 / (1 + math.exp(-t.verifier_output["rm_score"])))
        env = sum(t.reward_weights[k] * v for k, v in t.reward_components.items() if k != "reward_model")
        assert t.reward == pytest.approx(env + 0.5 * rm)
    import sqlite3

    db = sqlite3.connect(run_dir / "store.sqlite")
    (payload,) = db.execute("SELECT payload FROM events WHERE kind = 'reward_model'").fetchone()
    assert json.loads(payload)["calibration"] == cal
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert any("reward_model/score_mean" in r for r in rows)


def test_grader_and_reward_model_together_is_one_sentence(tmp_path):
    with pytest.raises(UserError, match="roles.grader and roles.reward_model do not combine yet"):
        load_recipe("smoke", ["roles.grader={url: http://127.0.0.1:1/v1, model: m}",
                              "roles.reward_model={path: " + str(tmp_path) + "}"])


def test_a_folder_that_is_not_a_reward_model_is_one_sentence(tmp_path):
    with pytest.raises(UserError, match="is not a reward model folder"):
        load_reward_model(tmp_path)
