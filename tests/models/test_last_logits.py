"""`last_logits`: a prefill that needs only its last column's logits runs the LM head on a contiguous copy of the
last hidden rows wherever the matmul is bfloat16 (weights or autocast), and keeps Hugging Face's int form in fp32."""

import copy

import torch

from tracerl.models.precision import last_logits, set_autocast


def test_fp32_keeps_the_int_and_bf16_gets_an_index(tiny):
    model, _ = tiny
    assert last_logits(model, 9) == 1
    bf16_weights = copy.deepcopy(model).to(torch.bfloat16)
    bf16_autocast = set_autocast(copy.deepcopy(model), "bf16")
    for m in (bf16_weights, bf16_autocast):
        idx = last_logits(m, 9)
        assert isinstance(idx, torch.Tensor) and idx.tolist() == [8]


def test_the_index_gives_the_last_columns_logits(tiny):
    model, _ = tiny
    m = copy.deepcopy(model).to(torch.bfloat16).eval()
    ids = torch.randint(3, 100, (3, 9))
    with torch.no_grad():
        full = m(input_ids=ids).logits[:, -1, :]
        kept = m(input_ids=ids, logits_to_keep=last_logits(m, 9)).logits
        as_int = m(input_ids=ids, logits_to_keep=1).logits
    assert kept.shape == (3, 1, full.shape[-1])
    torch.testing.assert_close(kept[:, -1, :].float(), full.float(), rtol=0, atol=2e-2)  # bf16 head, other blocking
    torch.testing.assert_close(kept.float(), as_int.float(), rtol=0, atol=2e-2)
