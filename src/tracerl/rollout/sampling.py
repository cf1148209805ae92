"""What one sampled token is made of: the `Sample` record and the inverse-CDF draw both engine paths share.

Each call draws one uniform per row and new token from the caller's generator (`draw_uniforms`);
row i's t-th token is the inverse-CDF draw of its processed sampling distribution at `u[i, t]`
(`sample_next`), so a seed fixes every token whatever the batch layout.
"""

from __future__ import annotations

import dataclasses

import torch

from tracerl.algorithms.logprobs import process_logits


@dataclasses.dataclass
class Sample:
    token_ids: list[int]
    logprobs: list[float]
    finish: str  # "stop" (a stop string or stop token), "length" (hit max_new_tokens)
    entropies: list[float] = dataclasses.field(default_factory=list)  # of the sampling distribution


def draw_uniforms(rows: int, max_new: int, generator, budgets=None) -> torch.Tensor:
    """One uniform per row and new token: `u[i, t]` decides row i's t-th sampled token. A `RowGenerators`
    (rollout/group_seeds.py, `rollout.seeding: group`) draws each group's rows from its own generator."""
    if hasattr(generator, "uniforms"):
        return generator.uniforms(budgets if budgets is not None else [max_new] * rows, max_new)
    return torch.rand((rows, max(max_new, 1)), generator=generator)


def row_seeds(rows: int, generator) -> list[int]:
    """One sampling seed per row (engines that seed each row), drawn group by group from a `RowGenerators`."""
    if hasattr(generator, "seeds"):
        return generator.seeds()
    return torch.randint(0, 2**31 - 1, (rows,), generator=generator).tolist()


def sample_next(logits_BV: torch.Tensor, u_B: torch.Tensor, *, temperature: float, top_p: float,
                top_k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(token_B, logprob_B, entropy_B) drawn by inverse CDF at `u_B` from the processed distribution."""
    B, V = logits_BV.shape
    if temperature == 0.0:
        zero = torch.zeros(B)
        return logits_BV.argmax(-1).cpu(), zero, zero
    logp = torch.log_softmax(process_logits(logits_BV, temperature=temperature, top_p=top_p, top_k=top_k), -1)
    probs = logp.exp()
    cdf = probs.cumsum(-1)
    target = (u_B.to(cdf.device) * cdf[:, -1]).unsqueeze(-1)
    tok = torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp_(max=V - 1)
    lp = logp.gather(-1, tok[:, None]).squeeze(-1)
    bad = torch.isinf(lp)  # rounding at the top of the CDF: take the last token that has mass
    if bool(bad.any()):
        last = V - 1 - (probs[bad] > 0).flip(-1).int().argmax(-1)
        tok[bad] = last
        lp = logp.gather(-1, tok[:, None]).squeeze(-1)
    ent = -(probs * logp.clamp_min(-1e30)).sum(-1)
    return tok.cpu(), lp.cpu(), ent.cpu()
