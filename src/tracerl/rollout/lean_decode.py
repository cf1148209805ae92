"""A decode step over a Llama-architecture model's own modules, without the Hugging Face forward around them.

A decode step feeds one token a row. Through `model(...)` that is ~2,000 small operations plus the forward's
Python (keyword plumbing, mask building, output classes, cache dispatch) per step; at SmolLM2-135M's size the
Python alone is 13-16 % of a step on a CPU (benchmarks/lean_decode.py). `LeanDecoder.step` walks the same
modules (embedding, each layer's projections, MLP, norms, head, whatever they are: `nn.Linear`, `PackedLinear`)
and performs the forward's arithmetic in the forward's order: the norms as the model's RMSNorm computes them
(float32, then back to the input dtype), rotary cos/sin from the model's own `inv_freq` and scaling, attention as
transformers' sdpa path does for one query token (the query heads grouped onto their key/value heads, the
session's boolean mask). The logits are the forward's bit for bit (float32, bfloat16 weights, bf16 autocast;
tests/rollout/test_lean_decode.py), so the tokens and behaviour log-probs are too.

Used by the generation session (kv_session.py) for its decode steps, never for prefill, where `lean_problem`
finds nothing to object to: `LlamaForCausalLM` / `Qwen2ForCausalLM` (Llama, SmolLM2, Qwen2 / 2.5, the tiny
model) with sdpa attention, a static rotary embedding, no sliding-window layers and no hooks on the model's
forward. Anything else (a PEFT wrapper, another architecture, eager attention, a hooked forward) decodes through
the model's forward (`engine.lean_decode`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM")
_STATIC_ROPE = ("default", "linear", "llama3")  # rope types whose inv_freq never changes with the sequence


def lean_problem(model) -> str | None:
    """Why `model`'s decode steps cannot run lean (one sentence), or None."""
    name = type(model).__name__
    if name not in _ARCHITECTURES:
        return f"the lean decode step covers {' and '.join(_ARCHITECTURES)}, not {name}"
    config = model.config
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return f"the lean decode step computes sdpa attention and {name} uses {config._attn_implementation}"
    rope = getattr(model.model.rotary_emb, "rope_type", "default")
    if rope not in _STATIC_ROPE:
        return f"the lean decode step takes a static rotary embedding, not rope_type {rope}"
    if model._forward_hooks or model._forward_pre_hooks:  # e.g. accelerate's device hooks: they must see each step
        return f"the lean decode step bypasses {name}.forward, which has hooks registered on it"
    if "sliding_attention" in (getattr(config, "layer_types", None) or ()):
        return "the lean decode step has no sliding-window attention, which this model's layers use"
    return None


def _rms_norm(norm: torch.nn.Module, h: torch.Tensor) -> torch.Tensor:
    """`LlamaRMSNorm.forward` / `Qwen2RMSNorm.forward`, the same operations in the same order."""
    x = h.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * x.to(h.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LeanDecoder:
    """One-token decode steps of `model` (a model `lean_problem` accepts) on a caller's key/value buffers."""

    def __init__(self, model):
        problem = lean_problem(model)
        if problem:
            raise ValueError(problem)
        self.model, self.decoder = model, model.model

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, caches, col: int) -> torch.Tensor:
        """Logits [k, V] of the next token after `tokens` [k, 1] at `positions` [k, 1]: each layer's key and value go
        to column `col` of rows [0, k) of its cache's `keys` / `values` buffers [rows, kv_heads, columns, head_dim],
        and the query attends to columns [0, col] where the boolean `mask` [k, 1, 1, col + 1] is set."""
        dec, k = self.decoder, tokens.shape[0]
        h = dec.embed_tokens(tokens)
        rot = dec.rotary_emb
        freqs = positions[..., None].float() * rot.inv_freq.to(device=h.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * rot.attention_scaling).to(h.dtype).unsqueeze(1)  # [k, 1, 1, head_dim]
        sin = (emb.sin() * rot.attention_scaling).to(h.dtype).unsqueeze(1)
        for layer, cache in zip(dec.layers[:self.model.config.num_hidden_layers], caches):
            attn, mlp = layer.self_attn, layer.mlp
            d = attn.head_dim
            x = _rms_norm(layer.input_layernorm, h)
            q = attn.q_proj(x).view(k, 1, -1, d).transpose(1, 2)
            key = attn.k_proj(x).view(k, 1, -1, d).transpose(1, 2)
            value = attn.v_proj(x).view(k, 1, -1, d).transpose(1, 2)
            q = (q * cos) + (_rotate_half(q) * sin)
            key = (key * cos) + (_rotate_half(key) * sin)
            cache.keys[:k, :, col:col + 1] = key
            cache.values[:k, :, col:col + 1] = value
            keys, values = cache.keys[:k, :, :col + 1], cache.values[:k, :, :col + 1]
            groups = attn.num_key_value_groups
            if groups > 1:  # one query token: its heads become the queries of their key/value head
                q = q.reshape(k, q.shape[1] // groups, groups, d)
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, dropout_p=0.0, scale=attn.scaling,
                                               is_causal=False)
            o = o.reshape(k, -1, 1, d).transpose(1, 2).contiguous().reshape(k, 1, -1)
            h = h + attn.o_proj(o)
            x = _rms_norm(layer.post_attention_layernorm, h)
            h = h + mlp.down_proj(mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x))
        return self.model.lm_head(_rms_norm(dec.norm, h))[:, -1, :]
