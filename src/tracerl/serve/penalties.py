"""OpenAI's `logit_bias`, `presence_penalty` and `frequency_penalty`, applied to the logits the gateway samples from.

As OpenAI defines them (platform.openai.com/docs/advanced-usage, "frequency and presence penalties"),
on the raw logits before temperature / top-p / top-k, over the tokens this sample has generated so far
(not the prompt):

    logit[j] += bias[j] - frequency_penalty * count[j] - presence_penalty * (count[j] > 0)

A bias of -100 all but bans a token and +100 all but forces it (OpenAI's words; here they are added as
they are, so a +100 token wins against any logit the tiny models produce). The sampled token's recorded
log-prob is under the adjusted, processed distribution: the one it was drawn from, as constrained
decoding records it (serve/constrained.py), so the learner's importance ratio uses the right behaviour
probability. The default recipe never sets these; its sampling does not pass through here.
"""

from __future__ import annotations

import dataclasses

import torch

from tracerl.serve.errors import bad_request


@dataclasses.dataclass(frozen=True)
class LogitAdjust:
    bias: dict[int, float]
    presence: float = 0.0
    frequency: float = 0.0

    def apply(self, logits_BV: torch.Tensor, generated: list[list[int]]) -> torch.Tensor:
        """`logits_BV` adjusted for each row's tokens so far (`generated[i]`); a new tensor."""
        out = logits_BV.clone()
        B, V = out.shape
        if self.bias:
            ids = torch.tensor(list(self.bias), dtype=torch.long)
            out[:, ids] += torch.tensor(list(self.bias.values()), dtype=out.dtype)
        if self.presence or self.frequency:
            counts = torch.zeros((B, V), dtype=out.dtype)
            for i, row in enumerate(generated):
                if row:
                    counts[i].index_add_(0, torch.tensor(row, dtype=torch.long).clamp_(max=V - 1),
                                         torch.ones(len(row), dtype=out.dtype))
            out -= self.frequency * counts + self.presence * (counts > 0).to(out.dtype)
        return out

    def describe(self) -> dict:
        """What the span's `sampling` records of it."""
        return {"logit_bias": {str(k): v for k, v in self.bias.items()}, "presence_penalty": self.presence,
                "frequency_penalty": self.frequency}


def logit_adjust(req, vocab: int) -> LogitAdjust | None:
    """The request's adjustment, or None when it changes nothing (the default path samples as before).
    `logit_bias` keys must be token ids of this model (400 naming the key otherwise)."""
    bias = {}
    for key, value in (req.logit_bias or {}).items():
        if not key.isdigit() or not 0 <= int(key) < vocab:
            raise bad_request(f"'logit_bias' key {key[:32]!r} is not a token id of this model; keys are ids in "
                              f"[0, {vocab}) as strings, e.g. {{\"42\": -100}}", param="logit_bias")
        if value:
            bias[int(key)] = float(value)
    presence, frequency = float(req.presence_penalty or 0.0), float(req.frequency_penalty or 0.0)
    if not bias and not presence and not frequency:
        return None
    return LogitAdjust(bias, presence, frequency)
