"""`optimizer_step` frees the gradients once the step is taken (they are not held through the next rollout and
forward), and the step itself is the one AdamW takes from the clipped gradient, worked by hand."""

import math

import torch

from tracerl.train.optim import make_optimizer, optimizer_step


def test_step_matches_hand_worked_adamw_and_frees_the_gradients():
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -2.0]]))
    opt = make_optimizer(model, lr=0.1)
    x = torch.tensor([[3.0, 4.0]])
    loss = model(x).sum()  # d loss / d w = x = (3, 4): norm 5, clipped to 1 -> (0.6, 0.8)
    norm = optimizer_step(opt, list(model.parameters()), loss, max_grad_norm=1.0)
    assert math.isclose(norm, 5.0, rel_tol=1e-6)
    assert model.weight.grad is None  # freed after the step
    # AdamW's first step moves each weight by lr * g / (|g| + eps) = lr * sign(g): (1 - 0.1, -2 - 0.1)
    torch.testing.assert_close(model.weight.detach(), torch.tensor([[0.9, -2.1]]), rtol=0, atol=1e-6)
    assert set(opt.state[model.weight]) >= {"exp_avg", "exp_avg_sq"}  # the optimizer's own state is kept


def test_a_second_step_sees_only_its_own_gradient():
    model = torch.nn.Linear(1, 1, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    w0 = float(model.weight)
    for x in (2.0, 3.0):  # were the first gradient kept and accumulated, the second step would move by 5
        optimizer_step(opt, list(model.parameters()), model(torch.tensor([[x]])).sum(), max_grad_norm=100.0)
    assert math.isclose(float(model.weight), w0 - 2.0 - 3.0, rel_tol=1e-6)
