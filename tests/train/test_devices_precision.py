"""model.device / model.autocast / model.gradient_checkpointing on the tiny model (CPU; bf16 autocast runs on CPU too)."""

import copy

import pytest
import torch

from tracerl.algorithms.batch import collate
from tracerl.config import load_recipe
from tracerl.errors import UserError
from tracerl.models import device as devmod
from tracerl.models.device import batch_to, resolve_device, role_devices
from tracerl.models.precision import checkpointing_enabled, enable_gradient_checkpointing, forward_context, set_autocast
from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes
from tracerl.train.roles import score_actions

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}


@pytest.fixture(scope="module")
def batch(tiny, parity_env):
    model, tok = tiny
    trajs = run_episodes(TorchEngine(model, tok), parity_env, parity_env.generate("train", 3, 0), ["a", "a", "b"],
                         budgets=LoopBudgets(1, 96, 8), sampling=SAMPLING, policy_version=0, seed=0,
                         generator=torch.Generator().manual_seed(0))
    return collate(trajs, pad_id=tok.pad_token_id, truncation="keep")


def test_device_resolution(monkeypatch):
    assert resolve_device("cpu") == torch.device("cpu")
    monkeypatch.setattr(devmod, "cuda_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(UserError, match=r"model.device is 'cuda' but torch sees no CUDA device.*model.device=cpu"):
        resolve_device("cuda")
    monkeypatch.setattr(devmod, "cuda_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(UserError, match="has 1 CUDA device"):
        resolve_device("cuda:3")
    assert resolve_device(None, default="cuda:0") == torch.device("cuda:0")
    monkeypatch.setattr(devmod, "cuda_available", lambda: False)
    # every role defaults to model.device and may name its own
    r = load_recipe("ppo", ["model.device=cpu", "roles.critic.device=cpu"])
    assert set(role_devices(r).values()) == {torch.device("cpu")}
    with pytest.raises(UserError, match="roles.critic.device is 'cuda'"):
        role_devices(load_recipe("ppo", ["roles.critic.device=cuda"]))
    with pytest.raises(UserError, match="bad value for 'model.device'"):
        load_recipe("smoke", ["model.device=gpu"])


def test_batch_moves_and_comes_back(tiny, batch):
    model, _ = tiny
    same = batch_to(batch, torch.device("cpu"))
    assert same is batch  # already there: no copy
    meta = batch_to(batch, torch.device("meta"))
    assert meta.ids_BT.device.type == "meta" and meta.trajectory_ids == batch.trajectory_ids
    out = score_actions(model, batch, temperature=1.0)
    assert out.logprobs_BT.device == batch.ids_BT.device


def test_bf16_autocast_changes_the_forward_dtype_and_the_loss_stays_finite(tiny, batch):
    model, tok = tiny
    m = set_autocast(copy.deepcopy(model), "bf16")
    seen = []
    proj = m.get_decoder().layers[0].mlp.down_proj  # a matmul: what autocast runs in bf16
    hook = proj.register_forward_hook(lambda mod, a, o: seen.append(o.dtype))
    ids = batch.ids_BT[:, :12]
    with forward_context(m):
        assert m(input_ids=ids).logits.dtype == torch.bfloat16
    assert model(input_ids=ids).logits.dtype == torch.float32  # the setting belongs to the model it is set on
    m.train()
    out = score_actions(m, batch, temperature=1.0)
    hook.remove()
    assert seen[-1] == torch.bfloat16  # the learner's forward ran in bf16
    assert out.logprobs_BT.dtype == torch.float32  # scores are taken in float32 from bf16 hidden states
    loss = -(out.logprobs_BT * batch.action_BT).sum() / batch.action_BT.sum()
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in m.parameters() if p.grad is not None]
    assert grads and all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in grads)  # weights stay fp32
    # the rollout engine samples under the same autocast: finite behavior log-probs, close to fp32's
    m.eval()
    s16 = TorchEngine(m, tok).generate([batch.ids_BT[0, :10].tolist()], max_new_tokens=4, temperature=1.0,
                                       generator=torch.Generator().manual_seed(1))[0]
    assert all(lp <= 0 and lp == lp for lp in s16.logprobs)


def test_gradient_checkpointing_gives_the_same_gradients(tiny, batch):
    model, _ = tiny
    plain, ckpt = copy.deepcopy(model), copy.deepcopy(model)
    enable_gradient_checkpointing(ckpt)
    assert checkpointing_enabled(ckpt) and not checkpointing_enabled(plain)
    grads = []
    for m in (plain, ckpt):
        m.train()
        out = score_actions(m, batch, temperature=1.0)
        (-(out.logprobs_BT * batch.action_BT).sum()).backward()
        grads.append({n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 10
    for n in grads[0]:
        torch.testing.assert_close(grads[1][n], grads[0][n], rtol=1e-5, atol=1e-6)
    # eval mode (the rollout engine) does not recompute anything and keeps its KV cache
    ckpt.eval()
    assert ckpt(input_ids=batch.ids_BT[:, :8], use_cache=True).past_key_values is not None


def test_placement_keys_fail_before_any_run_dir(tmp_path, monkeypatch):
    from tracerl.cli import main

    monkeypatch.setattr(devmod, "cuda_available", lambda: False)
    root = tmp_path / "runs"
    for override in ("model.device=cuda", "model.reference_device=cuda:1", "model.lora.r=0",
                     "model.lora.target_modules=[q_proj,qkv_proj]"):
        assert main(["train", "smoke", f"run.root={root}", override]) == 2, override
    assert not root.exists()  # refused before anything was written


def test_place_policy_applies_every_model_key(tiny):
    from tracerl.models.precision import autocast_dtype
    from tracerl.train.model_setup import new_reference, place_policy

    model, _ = tiny
    plain = place_policy(copy.deepcopy(model), load_recipe("smoke", ["model.device=cpu"]))
    assert autocast_dtype(plain) is None and not checkpointing_enabled(plain)
    assert next(plain.parameters()).dtype == torch.float32
    r = load_recipe("smoke", ["model.device=cpu", "model.dtype=bfloat16", "model.autocast=bf16",
                              "model.gradient_checkpointing=true", "model.reference_device=cpu"])
    m = place_policy(copy.deepcopy(model), r)
    assert next(m.parameters()).dtype == torch.bfloat16 and autocast_dtype(m) == torch.bfloat16
    assert checkpointing_enabled(m)
    ref = new_reference(m, r)  # full fine-tuning: a frozen copy that keeps the settings
    assert ref is not m and autocast_dtype(ref) == torch.bfloat16
    assert not any(p.requires_grad for p in ref.parameters())
