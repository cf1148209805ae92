"""An engine on Hugging Face `model.generate`, for models or set-ups the torch engine does not cover.

`HFGenerateEngine(model, tokenizer)` batches the prompts (left padding), calls
`model.generate(..., return_dict_in_generate=True, output_logits=True)` with an explicit
`GenerationConfig` (the model's own generation defaults, e.g. a top_k of 50, never leak in), and
cuts each row at its first stop (rollout/stops.py: the same rule as the torch engine, applied as
a `StoppingCriteria`) or at its own budget (`max_new_tokens` per row).

Behavior log-probs: HF returns the raw logits of every step (`output_logits`); each sampled
token's log-prob is taken under `process_logits(raw, temperature, top_p, top_k, keep=token)`,
the processed distribution the learner rescoring uses (algorithms/logprobs.py), so the two agree
to float precision. HF samples from its own warpers (temperature, top-k, top-p in that order, as
ours), so the tokens follow the same distribution; at a nucleus boundary tie the two masks may
differ by one token, which `keep` covers for the sampled token.

Seeds: HF draws from torch's global generator; each call takes one seed from the caller's
`generator` and samples under `torch.random.fork_rng()`, so the same generator state gives the
same tokens and the global RNG is left as it was. The tokens differ from the torch engine's for
the same seed (another sampler), and depend on the batch layout.

Weights: `from_learner(model, tokenizer, dtype=...)` samples from a copy (e.g. bfloat16 for
rollouts beside a float32 learner): the policy as a plain model (`models/weights.py`: a LoRA
policy's adapters merged into the base weights), under the policy's autocast;
`load_weights(state_dict, version)` copies the learner's plain weights in (cast to the copy's
dtype; `engine_api.sync_weights` sends `plain_state_dict`). Built on the learner's own module it
shares the weights and a sync is a version bump. Every `generate` runs in the model's
`forward_context` (bf16 autocast when `model.autocast` says so). Sessions are stateless (every
turn's full sequence is fed again).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tracerl.algorithms.logprobs import process_logits
from tracerl.models.precision import forward_context
from tracerl.rollout.sampling import Sample
from tracerl.rollout.stops import StopRules, row_budgets


class _RowStops:
    """`StoppingCriteria`: row i is done at its first stop token/string or its own budget."""

    def __init__(self, rule, budgets: list[int], prompt_len: int):
        self.rule, self.budgets, self.L = rule, budgets, prompt_len
        self.done = [False] * len(budgets)
        self.ids: list[list[int]] = [[] for _ in budgets]
        self.finish = [""] * len(budgets)

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        last = input_ids[:, -1].tolist()
        for i, t in enumerate(last):
            if self.done[i]:
                continue
            self.ids[i].append(int(t))
            if self.rule(self.ids[i], int(t)):
                self.done[i], self.finish[i] = True, "stop"
            elif len(self.ids[i]) >= self.budgets[i]:
                self.done[i], self.finish[i] = True, "length"
        return torch.tensor(self.done, dtype=torch.bool, device=input_ids.device)


class HFGenerateEngine:
    def __init__(self, model, tokenizer, *, owns_weights: bool = False):
        self.model, self.tokenizer = model, tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.version, self._owns = 0, owns_weights
        self._stops = StopRules(tokenizer)

    @classmethod
    def from_learner(cls, model, tokenizer, *, dtype: str | torch.dtype | None = None) -> HFGenerateEngine:
        """An engine on its own plain copy of `model` (LoRA merged; in `dtype` when given; under the model's
        autocast), synced by `load_weights`."""
        from tracerl.models.weights import engine_copy

        return cls(engine_copy(model, dtype=dtype), tokenizer, owns_weights=True)

    @property
    def owns_weights(self) -> bool:
        return self._owns

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def load_weights(self, state_dict, version: int) -> None:
        if state_dict is not None:
            if not self._owns:
                raise ValueError("this engine shares the learner's module; sync it with load_weights(None, version)")
            self.model.load_state_dict(state_dict)
        self.version = int(version)

    def open_session(self):
        from tracerl.rollout.engine import StatelessSession

        return StatelessSession(self)

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int | Sequence[int],
                 temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 stop_strings: tuple[str, ...] = (), stop_token_ids: Sequence[int] = (),
                 generator: torch.Generator | None = None) -> list[Sample]:
        from transformers import GenerationConfig, StoppingCriteriaList

        B = len(prompts)
        budgets = row_budgets(max_new_tokens, B)
        if hasattr(generator, "by_group"):  # rollout.seeding: group: one call (one seed) per group
            kw = dict(temperature=temperature, top_p=top_p, top_k=top_k, stop_strings=stop_strings,
                      stop_token_ids=stop_token_ids)
            return generator.by_group(lambda rows, g: self.generate([prompts[i] for i in rows], generator=g,
                                                                     max_new_tokens=[budgets[i] for i in rows], **kw))
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator))
        dev = self.device
        L = max(len(p) for p in prompts)
        ids = torch.full((B, L), self.pad_id, dtype=torch.long)
        mask = torch.zeros((B, L), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, L - len(p):] = torch.tensor(list(p), dtype=torch.long)
            mask[i, L - len(p):] = 1
        greedy = temperature == 0.0
        gc = GenerationConfig(max_new_tokens=max(budgets), do_sample=not greedy, pad_token_id=self.pad_id,
                              eos_token_id=None, bos_token_id=None, return_dict_in_generate=True, output_logits=True,
                              **({} if greedy else {"temperature": float(temperature), "top_p": float(top_p),
                                                    "top_k": int(top_k)}))
        stops = _RowStops(self._stops.rule(stop_strings, stop_token_ids), budgets, L)
        self.model.eval()
        with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []), forward_context(self.model):
            torch.manual_seed(seed)
            out = self.model.generate(input_ids=ids.to(dev), attention_mask=mask.to(dev), generation_config=gc,
                                      stopping_criteria=StoppingCriteriaList([stops]))
        samples = []
        for i in range(B):
            n = len(stops.ids[i])
            toks = stops.ids[i]
            if greedy:
                lp, ent = [0.0] * n, [0.0] * n
            else:
                raw = torch.stack([out.logits[t][i] for t in range(n)])  # (n, V): raw logits of row i's steps
                tok_t = torch.tensor(toks, device=raw.device)
                z = process_logits(raw, temperature=temperature, top_p=top_p, top_k=top_k, keep_B=tok_t)
                logp = torch.log_softmax(z, -1)
                lp = logp.gather(-1, tok_t[:, None])[:, 0].tolist()
                probs = logp.exp()
                ent = (-(probs * logp.clamp_min(-1e30)).sum(-1)).tolist()
            samples.append(Sample(list(toks), lp, stops.finish[i] or "length", ent))
        return samples
