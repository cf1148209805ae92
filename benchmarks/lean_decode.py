"""A decode step of SmolLM2-135M through the Hugging Face forward against a lean one over the same modules.

    .venv/bin/python benchmarks/lean_decode.py [--hf-dir /tmp/tracerl_smollm2_hf] [--rows 16] [--dtype bfloat16]
        [--threads 1] [--prompt 120] [--steps 24] [--reps 3] [--no-prepack]

A measurement for the engine's next step, not shipped code: the lean step walks the model's own modules (its
weights, its `PackedLinear`s under `engine.prepack`) with `F.rms_norm`, rotary on cos/sin computed once a step, a
preallocated key/value buffer and `scaled_dot_product_attention(enable_gqa=True)`, where the HF forward adds
~2,000 small ops and its Python per step. Llama-architecture models only (SmolLM2), every row the same length (no
mask). Prints the largest logit difference of one step (float32: 0, the same arithmetic in the same order; bfloat16:
bf16 rounding, HF's norm computes in float32) and, `--reps` times interleaved, the median ms a decode step of each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))


def lean_step(model, tok, pos: int, keys: list, values: list):
    """Logits of the next token after `tok` [B, 1] at position `pos`, the cache in `keys` / `values` [B, kv, T, d]."""
    cfg, dec = model.config, model.model
    nh, nkv = cfg.num_attention_heads, cfg.num_key_value_heads
    hd, eps, dt = cfg.hidden_size // nh, cfg.rms_norm_eps, dec.embed_tokens.weight.dtype
    B = tok.shape[0]
    h = dec.embed_tokens(tok)
    f = torch.full((B, 1), float(pos)) * dec.rotary_emb.inv_freq
    emb = torch.cat((f, f), -1)
    cos, sin = emb.cos().to(dt)[:, None, None], emb.sin().to(dt)[:, None, None]  # [B, 1, 1, d]
    for i, layer in enumerate(dec.layers):
        a, mlp = layer.self_attn, layer.mlp
        x = F.rms_norm(h, (h.shape[-1],), layer.input_layernorm.weight, eps)
        q = a.q_proj(x).view(B, 1, nh, hd).transpose(1, 2)
        k = a.k_proj(x).view(B, 1, nkv, hd).transpose(1, 2)
        v = a.v_proj(x).view(B, 1, nkv, hd).transpose(1, 2)
        q1, q2 = q.chunk(2, -1)
        k1, k2 = k.chunk(2, -1)
        q = q * cos + torch.cat((-q2, q1), -1) * sin
        k = k * cos + torch.cat((-k2, k1), -1) * sin
        keys[i][:, :, pos:pos + 1] = k
        values[i][:, :, pos:pos + 1] = v
        o = F.scaled_dot_product_attention(q, keys[i][:, :, :pos + 1], values[i][:, :, :pos + 1], enable_gqa=True)
        h = h + a.o_proj(o.transpose(1, 2).reshape(B, 1, -1))
        x = F.rms_norm(h, (h.shape[-1],), layer.post_attention_layernorm.weight, eps)
        h = h + mlp.down_proj(F.silu(mlp.gate_proj(x)) * mlp.up_proj(x))
    return model.lm_head(F.rms_norm(h, (h.shape[-1],), dec.norm.weight, eps)[:, -1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hf-dir", default="/tmp/tracerl_smollm2_hf")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=120, help="prompt tokens a row")
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-prepack", action="store_true", help="plain nn.Linear layers (engine.prepack=false)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM, DynamicCache
    from vs_trl_real import convert

    from tracerl.models.prepack import prepack

    dt = getattr(torch, args.dtype)
    model = AutoModelForCausalLM.from_pretrained(convert(args.hf_dir), dtype=dt).eval()
    if model.config.model_type != "llama":
        raise SystemExit(f"lean_decode.py: a Llama-architecture model is needed, not {model.config.model_type}")
    if not args.no_prepack:
        prepack(model)
    ids = torch.randint(100, 1000, (args.rows, args.prompt), generator=torch.Generator().manual_seed(0))
    n_layers, T = len(model.model.layers), args.prompt + args.steps + 1

    def prefill():
        cache = DynamicCache()
        out = model(input_ids=ids, past_key_values=cache, use_cache=True)
        return cache, out.logits[:, -1].argmax(-1, keepdim=True)

    def copied(cache):  # the prefill's keys and values in preallocated buffers
        shape = cache.layers[0].keys.shape
        keys = [cache.layers[i].keys.new_zeros((args.rows, shape[1], T, shape[3])) for i in range(n_layers)]
        values = [torch.zeros_like(k) for k in keys]
        for i in range(n_layers):
            keys[i][:, :, :args.prompt] = cache.layers[i].keys
            values[i][:, :, :args.prompt] = cache.layers[i].values
        return keys, values

    def time_hf() -> float:
        cache, tok = prefill()
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            out = model(input_ids=tok, past_key_values=cache, use_cache=True, logits_to_keep=1)
            tok = out.logits[:, -1].argmax(-1, keepdim=True)
            times.append(time.perf_counter() - t0)
        return statistics.median(times[2:]) * 1e3

    def time_lean() -> float:
        cache, tok = prefill()
        keys, values = copied(cache)
        times = []
        for s in range(args.steps):
            t0 = time.perf_counter()
            tok = lean_step(model, tok, args.prompt + s, keys, values).argmax(-1, keepdim=True)
            times.append(time.perf_counter() - t0)
        return statistics.median(times[2:]) * 1e3

    with torch.inference_mode():
        cache, tok = prefill()
        keys, values = copied(cache)
        ref = model(input_ids=tok, past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1].float()
        got = lean_step(model, tok, args.prompt, keys, values).float()
        print(f"{args.dtype}, {args.rows} rows, {args.threads} thread(s), prepack {not args.no_prepack}: largest logit "
              f"difference of one step {(ref - got).abs().max().item():.3g}")
        hf, lean = [], []
        for _ in range(args.reps):
            hf.append(time_hf())
            lean.append(time_lean())
            print(f"  HF forward {hf[-1]:.1f} ms a step, lean {lean[-1]:.1f} ms a step")
        print(f"median: HF {statistics.median(hf):.1f} ms, lean {statistics.median(lean):.1f} ms, "
              f"HF / lean {statistics.median(a / b for a, b in zip(hf, lean)):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
