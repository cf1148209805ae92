"""Each shipped paper recipe runs at smoke sizes and its mechanism's own metric shows it acted."""

import json

import pytest

from tracerl.config import load_recipe
from tracerl.run.pipeline import run_recipe

SMALL = ["run.threads=1", "run.progress=false", "model.tiny={hidden_size: 64, num_layers: 2, num_heads: 2, "
         "intermediate_size: 128, vocab_size: 320}", "env.train_tasks=96", "env.heldout_tasks=8",
         "env.train_difficulty=[0.0, 0.2]", "sft.demos=96", "sft.epochs=10", "sft.batch_size=16",
         "rl.prompts_per_step=4", "rl.eval_every=0", "rl.checkpoint_every=0", "rl.lr=0.001",
         "eval.tasks=8", "eval.samples=2", "eval.k=[1, 2]"]
STAGES = {"prorl": "rl.stages=[{name: prolong-1, steps: 2}, {name: prolong-2, steps: 2, reset_reference: true, "
                   "reset_optimizer: true}]",
          "magic": "rl.stages=[{name: context-160, steps: 2, max_tokens: 160}, {name: context-192, steps: 2, max_tokens: 192}]"}


def _rl_metrics(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [m for m in rows if m.get("stage") == "rl" and "reward/mean" in m]


def _run(name, tmp_path, *extra):
    steps = [STAGES[name]] if name in STAGES else ["rl.steps=3"]
    recipe = load_recipe(name, SMALL + steps + [f"run.dir={tmp_path / name}", *extra])
    run_recipe(recipe)
    return _rl_metrics(tmp_path / name)


def _seen(rows, key):
    return [m[key] for m in rows if key in m]


def test_dapo_drops_zero_variance_groups_and_penalises_overlong(tmp_path):
    rows = _run("dapo", tmp_path)
    assert sum(_seen(rows, "tasks/zero_variance_groups")) > 0  # dropped and replaced by new draws
    assert all(m["tasks/groups_kept"] <= 4 for m in rows) and max(_seen(rows, "tasks/rounds")) > 1
    assert min(_seen(rows, "reward/overlong_penalty")) < 0  # episodes past L_max - L_cache were penalised


def test_reinforce_pp_batch_advantages_have_mean_0_std_1(tmp_path):
    rows = _run("reinforce_pp", tmp_path)
    stepped = [m for m in rows if m.get("adv/std", 0) > 0]
    assert stepped and all(abs(m["adv/mean"]) < 1e-5 and abs(m["adv/std"] - 1) < 1e-3 for m in stepped)
    assert max(_seen(rows, "policy/kl_k3")) > 0


def test_magic_moves_the_entropy_coefficient(tmp_path):
    # the smoke-sized model's entropy is far above 0.4 nats, so the target is raised: c then climbs
    # by delta = 0.005 each step while entropy stays below it: 0.005, 0.010, 0.015, 0.020
    rows = _run("magic", tmp_path, "rl.algorithm.entropy.magic.target=20.0")
    assert _seen(rows, "entropy/magic_c") == pytest.approx([0.005, 0.010, 0.015, 0.020])
    # alpha_k = c_k (before the step) while entropy <= target: 0, 0.005, 0.010, 0.015
    assert _seen(rows, "policy/entropy_coef") == pytest.approx([0.0, 0.005, 0.010, 0.015])


def test_rstar2_resample_on_correct_drops_rollouts(tmp_path):
    rows = _run("rstar2", tmp_path, "rl.group_size=4")
    # 8 rollouts per task, 4 kept: 4 tasks x 4 dropped per step
    assert _seen(rows, "roc/dropped") == [16.0] * len(rows)


def test_prorl_resets_reference_and_optimizer_between_stages(tmp_path):
    rows = _run("prorl", tmp_path)
    kl = _seen(rows, "policy/kl_k3")
    assert len(kl) == 4 and max(kl) > 0


@pytest.mark.parametrize("name", ["dr_grpo", "rloo"])
def test_other_paper_recipes_train(name, tmp_path):
    rows = _run(name, tmp_path, "tasks.profile.tasks=16", "tasks.profile.attempts=2") if name == "rloo" else _run(name, tmp_path)
    assert len(rows) == 3 and any(m.get("policy/updates", 0) > 0 for m in rows)
    if name == "rloo":  # the Gaussian curriculum over profiled pass rates drew the batch
        assert _seen(rows, "tasks/curriculum_mean")
