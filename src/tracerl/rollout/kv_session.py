"""Generation sessions: one KV cache kept across the turns of a batch of episodes.

Layout. The rows of a call live in one preallocated buffer per layer, (rows, heads, columns,
head_dim), and every row writes the same column at each step. A boolean mask (rows, columns) says
which columns hold a row's tokens; the others are holes (left padding, the columns after a row
stopped, padding before a shorter observation). Position ids are each row's own token count, so
holes never shift a rotary position, and the model builds its causal mask from that 2D mask.

A call, given each row's full token sequence:
1. repack — a row whose cached tokens are a prefix of its sequence keeps its KV, gathered without
   holes and right-aligned to end at column P; other rows start empty; rows the call does not
   name are dropped (an episode that ended leaves the session);
2. chunk — the tokens not yet cached (the last sampled token and the observation after it, or a
   whole prompt) are fed in one forward, right-aligned in columns [P, P+W). Rows with nothing
   cached and the same tokens (a group's prompt) are fed once and their KV copied to the group;
3. decode — the rows still sampling are the prefix [0:k) of the buffer; a row that stops is
   swapped behind it, so it costs no further compute and its KV is kept for the next turn.

Sampling draws are those of `TorchEngine.generate_reference` (engine.py): same uniforms, same
processed distribution, so tokens and behavior log-probabilities agree with the plain loop.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Hashable, Sequence

import torch

from tracerl.rollout.stops import row_budgets
from transformers.cache_utils import Cache, CacheLayerMixin  # transformers >= 4.56

from tracerl.models.precision import forward_context, last_logits
from tracerl.rollout.lean_decode import LeanDecoder, lean_problem
from tracerl.rollout.sampling import Sample, draw_uniforms, sample_next


class _Cursor:
    """What the layers of the current forward see: its row count, first column and buffer size."""

    def __init__(self):
        self.rows = self.cols = self.k = self.col = 0


class _SlotLayer(CacheLayerMixin):
    """A preallocated layer cache; a forward writes columns [col, col + q) of rows [0, k)."""

    is_sliding = False

    def __init__(self, cursor: _Cursor):
        super().__init__()
        self.cursor = cursor

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        c = self.cursor
        self.keys = key_states.new_zeros((c.rows, key_states.shape[1], c.cols, key_states.shape[3]))
        self.values = value_states.new_zeros((c.rows, value_states.shape[1], c.cols, value_states.shape[3]))
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        k, c, q = self.cursor.k, self.cursor.col, key_states.shape[-2]
        self.keys[:k, :, c:c + q] = key_states
        self.values[:k, :, c:c + q] = value_states
        return self.keys[:k, :, :c + q], self.values[:k, :, :c + q]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.cursor.col + query_length, 0

    def get_seq_length(self) -> int:
        return self.cursor.col

    def get_max_length(self) -> int:
        return self.cursor.cols


@dataclasses.dataclass
class _Row:
    ids: list[int]  # the tokens whose keys and values are cached
    slot: int       # the row of the buffers that holds them


class GenerationSession:
    """Keeps each row's KV cache between calls; rows are named by the caller (e.g. episode index)."""

    def __init__(self, engine):  # a TorchEngine (engine.py opens sessions; this module never imports it)
        self.engine = engine
        self._rows: dict[Hashable, _Row] = {}
        self._layers: list[_SlotLayer] = []
        self._mask: torch.Tensor | None = None
        # sdpa takes a boolean (rows, 1, q, kv) mask as it is: build it here, from the 2D mask
        # (a view while decoding) instead of having the model rebuild one every forward
        config = getattr(engine.model, "config", None)
        self._own_mask = getattr(config, "_attn_implementation", None) == "sdpa"
        # decode steps over the model's own modules where the architecture allows (lean_decode.py)
        self._lean = LeanDecoder(engine.model) if getattr(engine, "lean_decode", False) \
            and self._own_mask and lean_problem(engine.model) is None else None
        self.stats = {"calls": 0, "fed_tokens": 0, "prefill_rows": 0, "row_forwards": 0}

    @torch.no_grad()
    def generate(self, keys: Sequence[Hashable], sequences: Sequence[Sequence[int]], **kw) -> list[Sample]:
        """One call under one autocast context (a no-op in fp32): under `model.autocast: bf16` each weight is
        cast to bf16 once per call (autocast's weight cache lives as long as the outermost context) instead
        of once per decode step; the cast is the same, so the tokens and log-probs are too."""
        with self.engine.sampling_scope(), forward_context(self.engine.model):  # engine.threads, autocast
            return self._generate(keys, sequences, **kw)

    def _generate(self, keys: Sequence[Hashable], sequences: Sequence[Sequence[int]], *,
                  max_new_tokens: int | Sequence[int], temperature: float = 1.0, top_p: float = 1.0,
                  top_k: int = 0, stop_strings: tuple[str, ...] = (), stop_token_ids: Sequence[int] = (),
                  generator: torch.Generator | None = None) -> list[Sample]:
        eng, dev = self.engine, self.engine.device
        B = len(sequences)
        budgets = row_budgets(max_new_tokens, B)
        R = max(budgets)
        uniforms = draw_uniforms(B, R, generator, budgets)
        stops = eng.stop_rule(stop_strings, stop_token_ids)
        seqs = [list(s) for s in sequences]

        # 1. which rows keep their cache; rows with nothing cached and equal tokens are fed once
        cached = []
        for key, seq in zip(keys, seqs):
            row = self._rows.get(key)
            keep = row is not None and len(seq) > len(row.ids) and seq[:len(row.ids)] == row.ids
            cached.append(len(row.ids) if keep else 0)
        pending = [seq[n:] for seq, n in zip(seqs, cached)]
        compute_of, firsts, seen = [], [], {}
        for i in range(B):
            share = tuple(pending[i]) if cached[i] == 0 else None
            if share is not None and share in seen:
                compute_of.append(seen[share])
                continue
            if share is not None:
                seen[share] = len(firsts)
            compute_of.append(len(firsts))
            firsts.append(i)
        U = len(firsts)
        P, W = max(cached), max(len(p) for p in pending)
        cols = P + W + R
        cursor = _Cursor()
        cursor.rows, cursor.cols = U, cols
        layers = [_SlotLayer(cursor) for _ in self._layers]
        mask = torch.zeros((U, cols), dtype=torch.bool, device=dev)
        self._repack(layers, mask, [(j, keys[i], cached[i]) for j, i in enumerate(firsts) if cached[i]], P)
        cache = Cache(layers=layers, layer_class_to_replicate=None) if layers else \
            Cache(layer_class_to_replicate=functools.partial(_SlotLayer, cursor))

        # 2. chunk: every compute row's uncached tokens, right-aligned to end at column P + W
        ids = torch.full((U, W), eng.pad_id, dtype=torch.long)
        pos = torch.zeros((U, W), dtype=torch.long)
        for j, i in enumerate(firsts):
            p, n = pending[i], cached[i]
            ids[j, W - len(p):] = torch.tensor(p, dtype=torch.long)
            pos[j, :] = n
            pos[j, W - len(p):] = torch.arange(n, n + len(p))
            mask[j, P + W - len(p):P + W] = True
        cursor.k, cursor.col = U, P
        eng.model.eval()
        with forward_context(eng.model):  # bf16 autocast when model.autocast says so
            out = eng.model(input_ids=ids.to(dev), attention_mask=self._chunk_mask(mask, P, W),
                            position_ids=pos.to(dev), use_cache=True, logits_to_keep=last_logits(eng.model, W),
                            **{eng._cache_arg: cache})
        logits = out.logits[:, -1, :]
        layers = cache.layers
        self.stats["calls"] += 1
        self.stats["prefill_rows"] += U
        self.stats["fed_tokens"] += sum(len(pending[i]) for i in firsts)
        if U < B:  # copy each shared prompt's cache (its filled columns) to every row of its group
            idx = torch.tensor(compute_of, device=dev)
            for layer in layers:
                for name in ("keys", "values"):
                    old = getattr(layer, name)
                    new = old.new_zeros((B, *old.shape[1:]))
                    new[:, :, :P + W] = old[:, :, :P + W].index_select(0, idx)
                    setattr(layer, name, new)
            mask, logits = mask.index_select(0, idx), logits.index_select(0, idx)
        cursor.rows = B

        # 3. decode: the rows still sampling are the buffer's prefix [0:k)
        row_at = list(range(B))  # buffer position -> call row
        seq_len = torch.tensor([len(s) for s in seqs], dtype=torch.long)
        out_ids: list[list[int]] = [[] for _ in range(B)]
        out_lp: list[list[float]] = [[] for _ in range(B)]
        out_ent: list[list[float]] = [[] for _ in range(B)]
        finish = [""] * B
        k, col = B, P + W
        for step in range(R):
            rows_t = torch.tensor(row_at[:k])
            tok, lp, ent = sample_next(logits, uniforms[rows_t, step], temperature=temperature, top_p=top_p,
                                       top_k=top_k)
            done_at = []
            for p, t, a, h in zip(range(k), tok.tolist(), lp.tolist(), ent.tolist()):
                i = row_at[p]
                out_ids[i].append(t)
                out_lp[i].append(a)
                out_ent[i].append(h)
                if stops(out_ids[i], t):
                    finish[i] = "stop"
                elif len(out_ids[i]) >= budgets[i]:
                    finish[i] = "length"
                if finish[i]:
                    done_at.append(p)
            for p in reversed(done_at):  # swap each stopped row behind the rows still sampling
                if p != k - 1:
                    self._swap(layers, mask, p, k - 1, col)
                    row_at[p], row_at[k - 1] = row_at[k - 1], row_at[p]
                k -= 1
            if k == 0:
                break
            live = row_at[:k]
            mask[:k, col] = True
            inp = torch.tensor([out_ids[i][-1] for i in live], dtype=torch.long)[:, None]
            posn = (seq_len[live] + step)[:, None]
            cursor.k, cursor.col = k, col
            step_mask = mask[:k, None, None, :col + 1] if self._own_mask else mask[:k, :col + 1]
            with forward_context(eng.model):
                if self._lean is not None:
                    logits = self._lean.step(inp.to(dev), posn.to(dev), step_mask, layers, col)
                else:
                    out = eng.model(input_ids=inp.to(dev), attention_mask=step_mask, position_ids=posn.to(dev),
                                    use_cache=True, logits_to_keep=1, **{eng._cache_arg: cache})
                    logits = out.logits[:, -1, :]
            self.stats["row_forwards"] += k
            col += 1

        # keep every row's cache (all but its last sampled token, which was never fed)
        self._layers, self._mask = layers, mask
        self._rows = {keys[i]: _Row(seqs[i] + out_ids[i][:-1], p) for p, i in enumerate(row_at)}
        return [Sample(out_ids[i], out_lp[i], finish[i] or "length", out_ent[i]) for i in range(B)]

    def _repack(self, layers: list[_SlotLayer], mask: torch.Tensor, kept: list[tuple[int, Hashable, int]],
                P: int) -> None:
        """Gather each kept row's cached columns, without holes, into columns [P - n, P) of row j."""
        if not kept:
            return
        src_r, src_c, dst_r, dst_c = [], [], [], []
        for j, key, n in kept:
            slot = self._rows[key].slot
            valid = self._mask[slot].nonzero().squeeze(-1)
            if valid.numel() != n:
                raise AssertionError(f"session row {key!r}: {valid.numel()} cached columns for {n} tokens")
            src_r.append(torch.full((n,), slot))
            src_c.append(valid.cpu())
            dst_r.append(torch.full((n,), j))
            dst_c.append(torch.arange(P - n, P))
        dev = mask.device
        sr, sc, dr, dc = (torch.cat(t).to(dev) for t in (src_r, src_c, dst_r, dst_c))
        c = layers[0].cursor if layers else None
        for old, new in zip(self._layers, layers):
            new.keys = old.keys.new_zeros((c.rows, old.keys.shape[1], c.cols, old.keys.shape[3]))
            new.values = old.values.new_zeros((c.rows, old.values.shape[1], c.cols, old.values.shape[3]))
            new.keys[dr, :, dc] = old.keys[sr, :, sc]
            new.values[dr, :, dc] = old.values[sr, :, sc]
            new.is_initialized = True
        mask[dr, dc] = True

    def _chunk_mask(self, mask: torch.Tensor, P: int, W: int) -> torch.Tensor:
        """The chunk's mask: cached columns and the chunk's own earlier columns, causally. A hole's
        query also sees its own column, so no softmax row is empty (its output is never read)."""
        if not self._own_mask:
            return mask[:, :P + W]
        U = mask.shape[0]
        allowed = mask[:, None, None, :P + W].expand(U, 1, W, P + W).clone()
        later = torch.ones((W, W), dtype=torch.bool, device=mask.device).triu(1)
        allowed[:, :, :, P:] &= ~later
        i = torch.arange(W, device=mask.device)
        allowed[:, :, i, P + i] = True
        return allowed

    @staticmethod
    def _swap(layers: list[_SlotLayer], mask: torch.Tensor, a: int, b: int, col: int) -> None:
        """Exchange rows a and b of every buffer (only columns [0, col) hold anything yet)."""
        ab, ba = [a, b], [b, a]
        for layer in layers:
            layer.keys[ab, :, :col] = layer.keys[ba, :, :col]
            layer.values[ab, :, :col] = layer.values[ba, :, :col]
        mask[ab, :col] = mask[ba, :col]
