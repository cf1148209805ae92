"""On a CUDA machine: the learner's chunked scoring and the rollout engine on the GPU agree with CPU.

Marked `gpu` (deselected by default; `pytest -m gpu`). Not run where this was written (no GPU)."""

import copy

import pytest
import torch

from tracerl.algorithms.batch import collate
from tracerl.models.precision import set_autocast
from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes
from tracerl.train.roles import score_actions

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}


def test_scores_and_rollouts_on_cuda_match_cpu(tiny, parity_env):
    model, tok = tiny
    gpu = copy.deepcopy(model).to("cuda")
    kw = dict(budgets=LoopBudgets(1, 96, 8), sampling=SAMPLING, policy_version=0, seed=0)
    tasks = parity_env.generate("train", 3, 0)
    cpu_trajs = run_episodes(TorchEngine(model, tok), parity_env, tasks, ["a"] * 3,
                             generator=torch.Generator().manual_seed(0), **kw)
    gpu_trajs = run_episodes(TorchEngine(gpu, tok, device="cuda"), parity_env, tasks, ["a"] * 3,
                             generator=torch.Generator().manual_seed(0), **kw)
    assert [t.token_ids for t in gpu_trajs] == [t.token_ids for t in cpu_trajs]
    batch = collate(cpu_trajs, pad_id=tok.pad_token_id, truncation="keep")  # stays on CPU: roles move it
    want = score_actions(model, batch, temperature=1.0, chunk_size=7)
    got = score_actions(gpu, batch, temperature=1.0, chunk_size=7)
    assert got.logprobs_BT.device.type == "cpu"
    torch.testing.assert_close(got.logprobs_BT, want.logprobs_BT, rtol=1e-4, atol=1e-4)
    gpu.train()
    out = score_actions(set_autocast(gpu, "bf16"), batch, temperature=1.0)
    (-(out.logprobs_BT * batch.action_BT).sum()).backward()
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in gpu.parameters())
