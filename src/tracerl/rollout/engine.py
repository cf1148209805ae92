"""The built-in torch generation engine: batched sampling with a KV cache.

Each sampled token's log-probability is taken under the distribution actually sampled from
(after temperature, top-k and top-p), so it is the behavior log-probability the learner needs.
Greedy decoding (temperature 0) is a point mass: its log-probabilities are 0.

Two paths produce the same tokens and log-probabilities (tests/rollout/test_engine_fast.py):
- `generate_reference`: the plain loop — left-pad the batch, prefill every row, grow the cache by
  concatenation, decode every row until the last one stops. It is the specification.
- `generate` / `open_session` (rollout/kv_session.py): a group's identical prompt is prefilled
  once, the cache is preallocated, stopped rows leave the batch, and across the turns of an
  episode only the new tokens (last action token, observation) are fed.

Randomness does not depend on which rows share a forward: each call draws one uniform per row and
new token, `(rows, max_new_tokens)` from the caller's generator, and row i's t-th token is the
inverse-CDF draw of its sampling distribution at `u[i, t]`. So a seed fixes every episode's tokens
whatever the batch layout, and the two paths can be compared token for token.
"""

from __future__ import annotations

import inspect
from collections.abc import Hashable, Sequence

import torch

from tracerl.algorithms.logprobs import process_logits  # noqa: F401  (the learner scores under the same)
from tracerl.models.precision import forward_context, last_logits
from tracerl.models.device import intra_op_threads
from tracerl.models.prepack import drop_packs, pack_all, pack_only_layers, release_packed_weights
from tracerl.rollout.sampling import Sample, draw_uniforms, sample_next  # noqa: F401  (re-exported)
from tracerl.rollout.stops import StopRules, row_budgets


class StatelessSession:
    """The session interface over `engine.generate`: every call feeds the full sequences."""

    def __init__(self, engine):
        self.engine = engine

    def generate(self, keys: Sequence[Hashable], sequences: Sequence[Sequence[int]], **kw) -> list[Sample]:
        return self.engine.generate([list(s) for s in sequences], **kw)


def _fast_session():
    """The session class, or None where transformers predates its cache-layer API (< 4.56)."""
    try:
        from tracerl.rollout.kv_session import GenerationSession
    except ImportError:
        return None
    return GenerationSession


class TorchEngine:
    """Samples continuations for a batch of token-id prompts with one shared KV cache.

    `fast=False` makes `generate` and `open_session` use the plain reference loop. An `Engine`
    (rollout/engine_api.py): built on the learner's own module (`owns_weights=False`, the default)
    a weight sync is a version bump; built on a copy, `load_weights` copies the tensors in.
    """

    def __init__(self, model, tokenizer, *, device: str | torch.device = "cpu", fast: bool = True,
                 owns_weights: bool = False, threads: int | None = None, lean_decode: bool = True):
        self.model, self.tokenizer, self.device = model, tokenizer, torch.device(device)
        self.fast = fast
        self.lean_decode = lean_decode  # engine.lean_decode: decode steps without the HF forward (lean_decode.py)
        self.threads = threads  # engine.threads: torch's intra-op threads while it samples (None: the process's)
        self.version, self._owns = 0, owns_weights
        self._asleep = False  # a copy of its own whose weights are freed through the learner's update
        # a copy of its own: its parameter shapes, to allocate what sleep (or a release of packed weights) freed
        self._shapes = {name: p.shape for name, p in model.named_parameters()} if owns_weights else {}
        if owns_weights:
            self._pack()
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self._stops = StopRules(tokenizer)
        # transformers >= 5 names the KV cache `cache`; earlier versions `past_key_values`
        params = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"

    @property
    def owns_weights(self) -> bool:
        return self._owns

    def load_weights(self, state_dict, version: int) -> None:
        """The learner's weights as `version`: copied into a model of its own (woken if asleep), else only the version."""
        if state_dict is not None:
            if not self._owns:
                raise ValueError("this TorchEngine shares the learner's module; sync it with load_weights(None, version)")
            alone = pack_only_layers(self.model)  # engine.prepack: packed from the incoming state, no copy kept
            for name, p in self.model.named_parameters():
                if name not in alone and p.shape != self._shapes[name]:  # freed by sleep or release_packed_weights
                    p.data = torch.empty(self._shapes[name], dtype=p.dtype, device=p.device)
            self._asleep = False
            if alone:
                missing = [k for k in alone if k not in state_dict]
                if missing:
                    raise KeyError(f"the weights to load have no {missing[0]!r}, which this engine's model has")
                left, unexpected = self.model.load_state_dict({k: v for k, v in state_dict.items() if k not in alone},
                                                              strict=False)
                if unexpected or set(left) - set(alone):
                    raise KeyError(f"the weights to load do not match this engine's model: unexpected "
                                   f"{sorted(unexpected)[:3]}, missing {sorted(set(left) - set(alone))[:3]}")
                for name, layer in alone.items():
                    layer.pack_from(state_dict[name])
            else:
                self.model.load_state_dict(state_dict)
            self._pack()
        self.version = int(version)

    def _pack(self) -> None:
        """engine.prepack: every layer packed now (not one by one in the first forward), and the weights of the layers
        whose packs are all their products read (oneDNN's, fbgemm's float16) freed."""
        if pack_all(self.model):
            release_packed_weights(self.model)

    def sleep(self) -> None:
        """Free a copy of its own's weights until the next `load_weights` (an engine beside the learner on one
        device: while the learner updates, that memory is the learner's). A shared module is never freed."""
        if self._owns and not self._asleep:
            drop_packs(self.model)  # engine.prepack: the packed copies go with the weights
            self._asleep = True
            for p in self.model.parameters():
                p.data = torch.empty(0, dtype=p.dtype, device=p.device)

    def _awake(self) -> None:
        if self._asleep:
            raise RuntimeError("this TorchEngine is asleep (its weights were freed for the learner's update); "
                               "load_weights wakes it")

    def stop_rule(self, stop_strings: Sequence[str], stop_token_ids: Sequence[int]):
        """A function (row's ids so far, new token) -> whether the row stops (rollout/stops.py)."""
        return self._stops.rule(stop_strings, stop_token_ids)

    def open_session(self):
        """A generation session that keeps each row's KV cache across calls (turns).

        A subclass that replaces `generate` is played through its `generate`, full sequences each turn.
        """
        self._awake()
        if not self.fast or type(self).generate is not TorchEngine.generate or _fast_session() is None:
            return StatelessSession(self)
        return _fast_session()(self)

    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int | Sequence[int],
                 temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 stop_strings: tuple[str, ...] = (), stop_token_ids: Sequence[int] = (),
                 generator: torch.Generator | None = None) -> list[Sample]:
        self._awake()
        kw = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, top_k=top_k,
                  stop_strings=stop_strings, stop_token_ids=stop_token_ids, generator=generator)
        if not self.fast or _fast_session() is None:
            return self.generate_reference(prompts, **kw)
        return _fast_session()(self).generate(list(range(len(prompts))), prompts, **kw)

    def sampling_scope(self):
        """The context every forward of this engine runs in: its own intra-op thread count (`engine.threads`)."""
        return intra_op_threads(self.threads)

    @torch.no_grad()
    def generate_reference(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int | Sequence[int],
                           temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                           stop_strings: tuple[str, ...] = (), stop_token_ids: Sequence[int] = (),
                           generator: torch.Generator | None = None) -> list[Sample]:
        """The plain loop every faster path must reproduce (same tokens, same log-probs)."""
        B = len(prompts)
        budgets = row_budgets(max_new_tokens, B)
        uniforms = draw_uniforms(B, max(budgets), generator, budgets)
        L = max(len(p) for p in prompts)
        ids = torch.full((B, L), self.pad_id, dtype=torch.long)
        mask = torch.zeros((B, L), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding keeps every row's last token at -1
            ids[i, L - len(p):] = torch.tensor(p, dtype=torch.long)
            mask[i, L - len(p):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        stops = self.stop_rule(stop_strings, stop_token_ids)

        out_ids: list[list[int]] = [[] for _ in range(B)]
        out_lp: list[list[float]] = [[] for _ in range(B)]
        out_ent: list[list[float]] = [[] for _ in range(B)]
        finish = [""] * B
        self.model.eval()
        with self.sampling_scope(), forward_context(self.model):  # bf16 autocast when model.autocast says so
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                             logits_to_keep=last_logits(self.model, ids.shape[1]))
        past, logits = self._cache_of(out), out.logits[:, -1, :]
        next_pos = positions[:, -1:] + 1
        for step in range(max(budgets)):
            tok, lp, ent = sample_next(logits, uniforms[:, step], temperature=temperature, top_p=top_p, top_k=top_k)
            for i in range(B):
                if finish[i]:
                    continue
                t = int(tok[i])
                out_ids[i].append(t)
                out_lp[i].append(float(lp[i]))
                out_ent[i].append(float(ent[i]))
                if stops(out_ids[i], t):
                    finish[i] = "stop"
                elif len(out_ids[i]) >= budgets[i]:
                    finish[i] = "length"
            if all(finish):
                break
            mask = torch.cat([mask, torch.ones((B, 1), dtype=mask.dtype, device=mask.device)], dim=1)
            with self.sampling_scope(), forward_context(self.model):
                out = self.model(input_ids=tok[:, None].to(self.device), attention_mask=mask, position_ids=next_pos,
                                 use_cache=True, **{self._cache_arg: past})
            past, logits = self._cache_of(out), out.logits[:, -1, :]
            next_pos = next_pos + 1
        return [Sample(out_ids[i], out_lp[i], finish[i] or "length", out_ent[i]) for i in range(B)]

    def _cache_of(self, out):
        return getattr(out, "cache", None) if self._cache_arg == "cache" else out.past_key_values
