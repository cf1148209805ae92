"""The policy's AdamW runs torch's fused kernel where it exists (train/optim.py `fusable`), and its first step is
the AdamW step worked by hand: m = (1-b1) g, v = (1-b2) g^2, bias-corrected to g and g^2, so each weight moves by
lr * g / (|g| + eps) (weight decay 0)."""

import torch

from tracerl.train.optim import fusable, make_optimizer


def test_the_fused_kernel_is_used_on_cpu_and_its_first_step_is_the_hand_worked_one():
    lin = torch.nn.Linear(3, 2, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]]))
    opt = make_optimizer(lin, lr=0.1)
    assert opt.defaults["fused"] is True
    g = torch.tensor([[0.5, -0.25, 2.0], [1e-3, -4.0, 0.0]])
    lin.weight.grad = g.clone()
    before = lin.weight.detach().clone()
    opt.step()
    eps = opt.defaults["eps"]
    expected = before - 0.1 * g / (g.abs() + eps)
    assert torch.allclose(lin.weight.detach(), expected, atol=1e-6, rtol=0)
    assert float(lin.weight[1, 2]) == -1.0  # a zero gradient leaves its weight where it was


def test_non_floating_or_no_parameters_leave_the_choice_to_torch():
    assert fusable([]) is None
    assert fusable([torch.zeros(2, dtype=torch.int64)]) is None
    assert fusable([torch.nn.Parameter(torch.zeros(2, dtype=torch.bfloat16))]) is True
