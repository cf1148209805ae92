"""LoRA through peft on the tiny model: what trains, the reference without a copy, adapter-only
checkpoints that resume exactly, and a merged export that reloads as a plain HF model."""

import copy

import pytest
import torch

pytest.importorskip("peft")

from tracerl.algorithms.batch import collate  # noqa: E402
from tracerl.algorithms.spec import StepContext  # noqa: E402
from tracerl.config import load_recipe  # noqa: E402
from tracerl.errors import UserError  # noqa: E402
from tracerl.models import lora  # noqa: E402
from tracerl.models.load import load_model_and_tokenizer  # noqa: E402
from tracerl.config.model import LoraSettings  # noqa: E402
from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes  # noqa: E402
from tracerl.train.checkpoint import load_trainer_state, save_checkpoint  # noqa: E402
from tracerl.train.roles import FrozenRole, PolicyRole, Roles  # noqa: E402
from tracerl.train.update import rl_update  # noqa: E402

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
POINTER = {"path": "base", "gguf_file": None, "dtype": "float32", "relative": True}


@pytest.fixture(scope="module")
def trajs(tiny, parity_env):
    model, tok = tiny
    return run_episodes(TorchEngine(model, tok), parity_env, parity_env.generate("train", 4, 0), ["g"] * 4,
                        budgets=LoopBudgets(1, 96, 8), sampling=SAMPLING, policy_version=0, seed=0,
                        generator=torch.Generator().manual_seed(0))


def _adapted(model, r=4):
    return lora.attach_lora(copy.deepcopy(model), LoraSettings(r=r, alpha=8.0), pointer=POINTER)


def _update(model, trajs, tok, state=None, ref=None, kl=0.0, policy=None):
    recipe = load_recipe("smoke", [f"rl.algorithm.kl.coef={kl}", "rl.minibatches=1", "rl.truncation=keep"])
    policy = policy or PolicyRole(model, lr=0.05, max_grad_norm=1.0, sampling=SAMPLING, state=state)
    roles = Roles(policy, FrozenRole(ref, temperature=1.0) if ref is not None else None)
    batch = collate(trajs, pad_id=tok.pad_token_id, truncation="keep")
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])  # a non-zero advantage on every row
    stats, _ = rl_update(recipe.rl.algorithm, roles, batch, rewards, minibatches=1,
                         ctx=StepContext(max_tokens=recipe.env.max_tokens))
    assert stats["updates"] == 1
    return policy, stats


def test_only_the_adapter_trains_and_base_weights_stay_bit_identical(tiny, trajs):
    model, tok = tiny
    m = _adapted(model)
    trainable = {n for n, p in m.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    policy, _ = _update(m, trajs, tok)
    assert sum(len(g["params"]) for g in policy.optimizer.param_groups) == len(trainable)  # AdamW holds only these
    after = dict(m.named_parameters())
    for n, p in after.items():
        if n in trainable and "lora_B" in n:
            assert not torch.equal(p, before[n]), n  # B starts at 0 and is what the first step moves
        elif n not in trainable:
            assert torch.equal(p, before[n]), n  # bit-identical base


def test_reference_is_the_adapter_disabled_policy_without_a_copy(tiny, trajs):
    model, tok = tiny
    m = _adapted(model)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.1)  # a trained-looking adapter: the policy now differs from the base
    batch = collate(trajs, pad_id=tok.pad_token_id, truncation="keep")
    ref = FrozenRole(lora.AdapterDisabled(m), temperature=1.0).logprobs(batch)
    base = FrozenRole(model, temperature=1.0).logprobs(batch)
    assert torch.equal(ref, base)  # exactly the base model's scores
    adapted = FrozenRole(m, temperature=1.0).logprobs(batch)
    assert not torch.equal(adapted, base)  # and the adapter is back on afterwards
    # a KL step against that reference runs and sees a positive divergence
    _, stats = _update(m, trajs, tok, ref=lora.AdapterDisabled(m), kl=0.1)
    assert stats["kl_k3"] > 0


def test_checkpoint_holds_only_the_adapter_and_resumes_exactly(tiny, tiny_dir, trajs, tmp_path):
    from safetensors.torch import load_file

    model, tok = tiny
    base_dir = tmp_path / "base"
    lora.save_base(model, tok, base_dir)  # what the pipeline writes as <run>/lora_base
    m = _adapted(model)
    policy, _ = _update(m, trajs, tok)
    ckpt = save_checkpoint(tmp_path / "step_1", m, tok, state={"stage": "rl", "step": 1,
                                                                "roles_state": {"policy": policy.state_dict()}})
    files = {p.name for p in ckpt.iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json", "lora_base.json"} <= files
    assert not files & {"model.safetensors", "config.json", "reference.safetensors"}
    tensors = load_file(ckpt / "adapter_model.safetensors")
    assert tensors and all("lora_A" in k or "lora_B" in k for k in tensors)
    # resume: base from the pointer + the adapter + the optimizer state; the next update is the same, bit for bit
    m2, _ = load_model_and_tokenizer(ckpt)
    assert lora.is_lora(m2)
    sd1, sd2 = m.state_dict(), m2.state_dict()
    assert sd1.keys() == sd2.keys() and all(torch.equal(sd1[k], sd2[k]) for k in sd1)
    state = load_trainer_state(ckpt)["roles_state"]["policy"]
    torch.manual_seed(5)
    _update(m, trajs, tok, policy=policy)  # the run that was not interrupted
    torch.manual_seed(5)
    _update(m2, trajs, tok, state=state)
    sd1, sd2 = m.state_dict(), m2.state_dict()
    assert all(torch.equal(sd1[k], sd2[k]) for k in sd1)


def test_merged_export_reloads_as_plain_hf_with_the_same_logits(tiny, trajs, tmp_path):
    from transformers import AutoModelForCausalLM

    from tracerl.commands.merge import merge_checkpoint

    model, tok = tiny
    lora.save_base(model, tok, tmp_path / "base")
    m = _adapted(model)
    _update(m, trajs, tok)
    ckpt = save_checkpoint(tmp_path / "step_1", m, tok, state={"stage": "rl", "step": 1})
    out = merge_checkpoint(ckpt, tmp_path / "merged")
    plain = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    assert not any("lora" in k for k in plain.state_dict())
    ids = torch.tensor([trajs[0].token_ids])
    with torch.no_grad():
        want, got = m(input_ids=ids).logits, plain(input_ids=ids).logits
        assert not torch.allclose(want, model(input_ids=ids).logits, atol=1e-4)  # the adapter did something
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    with pytest.raises(UserError, match="already exists"):
        merge_checkpoint(ckpt, out)
    with pytest.raises(UserError, match="not a LoRA checkpoint"):
        merge_checkpoint(out, tmp_path / "again")


def test_bad_lora_settings_are_one_sentence(tiny):
    model, _ = tiny
    with pytest.raises(UserError, match=r"target_modules names 'qkv'.*linear layers are .*q_proj"):
        lora.attach_lora(copy.deepcopy(model), LoraSettings(target_modules=["qkv"]), pointer=POINTER)
    for overrides, msg in ((["model.lora.r=0"], "greater than 0"),
                           (["model.lora.r=8", "rl.stages=[{name: a, steps: 1}, {name: b, steps: 1, reset_reference: true}]"],
                            "reset_reference cannot apply"),
                           (["model.lora.r=8", "model.reference_device=cpu", "model.device=auto"],
                            "model.reference_device cannot apply")):
        with pytest.raises(UserError, match=msg):
            load_recipe("smoke", overrides)
