"""The built-in torch generation engine: batched sampling with a KV cache.

Each sampled token's log-probability is taken under the distribution actually sampled from
(after temperature, top-k and top-p), so it is the behavior log-probability the learner needs.
Greedy decoding (temperature 0) is a point mass: its log-probabilities are 0.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence

import torch

from tracerl.algorithms.logprobs import process_logits  # noqa: F401  (the learner scores under the same)


@dataclasses.dataclass
class Sample:
    token_ids: list[int]
    logprobs: list[float]
    finish: str  # "stop" (a stop string or stop token), "length" (hit max_new_tokens)
    entropies: list[float] = dataclasses.field(default_factory=list)  # of the sampling distribution


class TorchEngine:
    """Samples continuations for a batch of token-id prompts with one shared KV cache."""

    def __init__(self, model, tokenizer, *, device: str | torch.device = "cpu"):
        self.model, self.tokenizer, self.device = model, tokenizer, torch.device(device)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self._stop_id_cache: dict[tuple[str, ...], set[int]] = {}
        # transformers >= 5 names the KV cache `cache`; earlier versions `past_key_values`
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"

    def _single_token_stops(self, stop_strings: tuple[str, ...]) -> set[int] | None:
        """Token ids of stop strings that are whole tokens; None when some stop spans tokens."""
        if stop_strings not in self._stop_id_cache:
            vocab = self.tokenizer.get_vocab()
            ids = {vocab[s] for s in stop_strings if s in vocab}
            self._stop_id_cache[stop_strings] = ids if len(ids) == len(stop_strings) else None
        return self._stop_id_cache[stop_strings]

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int | Sequence[int],
                 temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 stop_strings: tuple[str, ...] = (), stop_token_ids: Sequence[int] = (),
                 generator: torch.Generator | None = None) -> list[Sample]:
        B = len(prompts)
        budgets = [max_new_tokens] * B if isinstance(max_new_tokens, int) else list(max_new_tokens)
        L = max(len(p) for p in prompts)
        ids = torch.full((B, L), self.pad_id, dtype=torch.long)
        mask = torch.zeros((B, L), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding keeps every row's last token at -1
            ids[i, L - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, L - len(p):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        stop_ids = set(stop_token_ids)
        single = self._single_token_stops(tuple(stop_strings))
        if single is not None:
            stop_ids |= single

        out_ids: list[list[int]] = [[] for _ in range(B)]
        out_lp: list[list[float]] = [[] for _ in range(B)]
        out_ent: list[list[float]] = [[] for _ in range(B)]
        finish = [""] * B
        self.model.eval()
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                         logits_to_keep=1)
        past, logits = self._cache_of(out), out.logits[:, -1, :]
        next_pos = positions[:, -1:] + 1
        for step in range(max(budgets)):
            if temperature == 0.0:
                tok = logits.argmax(-1)
                lp = ent = torch.zeros(B)
            else:
                logp = torch.log_softmax(process_logits(logits, temperature=temperature, top_p=top_p, top_k=top_k), -1)
                tok = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
                lp = logp.gather(-1, tok[:, None]).squeeze(-1)
                ent = -(logp.exp() * logp.clamp_min(-1e30)).sum(-1)
            for i in range(B):
                if finish[i]:
                    continue
                t = int(tok[i])
                out_ids[i].append(t)
                out_lp[i].append(float(lp[i]))
                out_ent[i].append(float(ent[i]))
                if t in stop_ids or (single is None and stop_strings and self._ends_with_stop(out_ids[i], stop_strings)):
                    finish[i] = "stop"
                elif len(out_ids[i]) >= budgets[i]:
                    finish[i] = "length"
            if all(finish):
                break
            mask = torch.cat([mask, torch.ones((B, 1), dtype=mask.dtype, device=mask.device)], dim=1)
            out = self.model(input_ids=tok[:, None].to(self.device), attention_mask=mask, position_ids=next_pos,
                             use_cache=True, **{self._cache_arg: past})
            past, logits = self._cache_of(out), out.logits[:, -1, :]
            next_pos = next_pos + 1
        return [Sample(out_ids[i], out_lp[i], finish[i] or "length", out_ent[i]) for i in range(B)]

    def _cache_of(self, out):
        return getattr(out, "cache", None) if self._cache_arg == "cache" else out.past_key_values

    def _ends_with_stop(self, ids: list[int], stop_strings: Sequence[str]) -> bool:
        tail = self.tokenizer.decode(ids[-16:], skip_special_tokens=False)
        return any(s in tail for s in stop_strings)
