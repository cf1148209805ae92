"""A few RL steps of a randomly initialised ~0.5B Qwen2-architecture model, built here from a config (nothing
downloads): bf16 weights, gradient checkpointing, the policy sharded by FSDP2 over NCCL at world size 1
(`placement.learner.where: processes`, `learner.ranks: 1`), rollouts on the torch engine; prints tokens/s,
step time, peak GPU memory and MFU. Part of benchmarks/gpu_check.sh (issue 37 item 6).

    python benchmarks/gpu_qwen_rl.py --work /tmp/gpu_check            # on a CUDA machine
    python benchmarks/gpu_qwen_rl.py --work /tmp/gpu_check --dry      # CPU, a toy width: checks the path only

The model: Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 heads / 2 KV heads, MLP 4864, vocabulary 151 936,
tied embeddings: 494M parameters) with a byte-level BPE tokenizer trained on arithmetic text and
padded with placeholder tokens to the model's vocabulary. Its rewards are all 0 (it is random), so an
entropy bonus (rl.algorithm.entropy.coef 0.01) gives every row a gradient and, its episodes kept when they run
out of tokens (rl.truncation keep: a random model never ends one), each step a real optimizer step.

MFU: 6 · N · (tokens the learner trained on) / (learner seconds) / peak bf16 FLOP/s (H100 / H200 SXM:
989 TFLOP/s dense; set PEAK_TFLOPS for other cards), and the same over the whole step (rollout included,
counting 2 · N per generated token). Gradient-checkpoint recompute and the no-gradient scoring passes
are not counted (model FLOPs, not hardware FLOPs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

SHAPE = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
             num_key_value_heads=2, vocab_size=151_936)
TOY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
           num_key_value_heads=1, vocab_size=151_936)


def build(out: Path, shape: dict, device: str) -> int:
    """Tokenizer + random Qwen2 model saved to `out` (HF format); returns the parameter count."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from tracerl.models.tiny import build_tokenizer

    texts = [f"What is {a} * {b} + {a - b}? Use the calculator: <tool_call>{a}*{b}</tool_call> The answer is"
             for a in range(40) for b in range(0, 40, 3)]
    tok = build_tokenizer(texts, vocab_size=2048, tags=())
    tok.add_tokens([f"<|x{i}|>" for i in range(shape["vocab_size"] - len(tok))])  # to the model's vocabulary
    cfg = Qwen2Config(**shape, max_position_embeddings=4096, tie_word_embeddings=True, rms_norm_eps=1e-6,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None,
                      torch_dtype="bfloat16")
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    tok.save_pretrained(out)
    model.save_pretrained(out, safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def peak_flops() -> float:
    if os.environ.get("PEAK_TFLOPS"):
        return float(os.environ["PEAK_TFLOPS"]) * 1e12
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else ""
    return 989.4e12 if ("H100" in name or "H200" in name) else 312e12 if "A100" in name else float("nan")


def _row_tokens(run_dir: Path) -> float:
    from tracerl.store import Store

    with Store(run_dir / "store.sqlite") as store:
        return float(sum(len(t.token_ids) for t in store.trajectories(stage="rl")))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/gpu_check")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--dry", action="store_true", help="CPU, toy width, 1 step: checks the path, measures nothing")
    ap.add_argument("--new-tokens", type=int, default=128)
    a = ap.parse_args()
    device = "cpu" if a.dry else "cuda"
    work = Path(a.work)
    model_dir, run_dir = work / "qwen2_random", work / "qwen2_rl"
    t0 = time.time()
    n_params = build(model_dir, TOY if a.dry else SHAPE, device)
    print(f"built a random Qwen2 model: {n_params / 1e6:.0f}M parameters in {time.time() - t0:.0f} s", flush=True)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    from tracerl.api import train

    steps = 1 if a.dry else a.steps
    overrides = [f"model.path={model_dir}", f"model.device={device}", "model.dtype=bfloat16",
                 "model.gradient_checkpointing=true", "learner.ranks=1", "placement.learner.where=processes",
                 "stages=[rl]", f"rl.steps={steps}", "rl.prompts_per_step=8", "rl.group_size=4", "rl.minibatches=1",
                 "rl.algorithm.entropy.coef=0.01", "rl.truncation=keep", "rl.eval_every=0", "rl.checkpoint_every=0",
                 f"env.max_new_tokens={16 if a.dry else a.new_tokens}", "env.max_tokens=768", "run.progress=false",
                 f"run.dir={run_dir}", "run.threads=4"]
    train("default", *overrides)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r.get("stage") == "rl" and "time/learner_s" in r]
    if not rl or not all(r.get("policy/updates", 0) > 0 for r in rl):
        raise SystemExit("gpu_qwen_rl: FAILED: an RL step took no optimizer step (or none was logged)")
    timed = rl[1:] or rl  # the first step includes CUDA / NCCL warm-up
    learn_s = statistics.mean(r["time/learner_s"] for r in timed)
    roll_s = statistics.mean(r["time/rollout_s"] for r in timed)
    gen = statistics.mean(r.get("throughput/generated_tokens", 0.0) for r in timed)
    trained = _row_tokens(run_dir) / len(rl)  # tokens the learner runs per step: whole rows, prompt included
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")
    flops = peak_flops()
    print(f"qwen2-{'toy' if a.dry else '0.5B'}-random bf16 + grad ckpt, FSDP2 world 1 ({'nccl' if device == 'cuda' else 'gloo'}): "
          f"{len(rl)} RL steps | step {learn_s + roll_s:.2f} s (rollout {roll_s:.2f} s, learner {learn_s:.2f} s) | "
          f"rollout tokens/s {gen / max(roll_s, 1e-9):.0f} | learner tokens/s {trained / max(learn_s, 1e-9):.0f} | "
          f"peak GPU memory {peak:.2f} GiB | learner MFU {6 * n_params * trained / learn_s / flops:.3f} | "
          f"step MFU {(6 * n_params * trained + 2 * n_params * gen) / (learn_s + roll_s) / flops:.3f}", flush=True)


if __name__ == "__main__":
    main()
