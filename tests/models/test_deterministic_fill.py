"""run.deterministic turns on torch's deterministic algorithms without their NaN fill of every `torch.empty`
(models/device.py set_deterministic): the fill is a debugging guard, so dropping it must change no number."""

import copy

import torch

from tracerl.models.device import configure_torch, set_deterministic


def _grads(model, ids):
    model.zero_grad(set_to_none=True)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    return out.loss.detach().clone(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_configure_torch_is_deterministic_without_the_fill():
    before = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled(),
              torch.utils.deterministic.fill_uninitialized_memory)
    try:
        configure_torch(1, deterministic=True, device=torch.device("cpu"))
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.utils.deterministic.fill_uninitialized_memory is False
        configure_torch(1, deterministic=False, device=torch.device("cpu"))
        assert not torch.are_deterministic_algorithms_enabled()
    finally:
        torch.set_num_threads(before[0])
        torch.use_deterministic_algorithms(before[1], warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = before[2]


def test_the_fill_changes_no_loss_and_no_gradient(tiny):
    model = copy.deepcopy(tiny[0])
    ids = torch.randint(3, 100, (3, 17), generator=torch.Generator().manual_seed(0))
    before = (torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory)
    try:
        set_deterministic(True)
        torch.utils.deterministic.fill_uninitialized_memory = True  # torch's default with deterministic algorithms
        loss_fill, grads_fill = _grads(model, ids)
        set_deterministic(True)
        loss, grads = _grads(model, ids)
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = before[1]
    assert torch.equal(loss, loss_fill) and len(grads) == len(grads_fill) > 0
    assert all(torch.equal(a, b) for a, b in zip(grads, grads_fill))
