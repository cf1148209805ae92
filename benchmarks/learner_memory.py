"""Peak memory of the learner's scoring (log-probs + entropy of every ACTION token, forward + backward) on a
SmolLM2-sized vocabulary: the plain full-vocabulary computation vs the learner's chunked one.

    .venv/bin/python benchmarks/learner_memory.py [--rows 16] [--tokens 256] [--layers 2] [--label now]

A random Llama with SmolLM2-135M's width and vocabulary (hidden 576, 9 heads, 3 KV heads, vocab 49,152) but
`--layers` layers, a batch of `--rows` rows of `--tokens` tokens whose last three quarters are ACTION tokens.
Each case runs in a fresh subprocess: model and batch built, the peak-RSS counter reset
(benchmarks/loss_memory.py), one forward + backward of Σ log π + Σ H, then the resident high-water mark above
the resident size before it. `plain`: `model(...).logits` → float32 `log_softmax` over the vocabulary at
every position, entropy from it (the textbook computation, `[rows, T, V]` several times); `learner`:
`train.roles.score_actions` as the RL learner runs it (share_prefix off, so the rows are independent).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from loss_memory import _reset_peak, _status_kb  # noqa: E402


def child(args) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tracerl.algorithms.batch import Batch
    from tracerl.train.roles import score_actions

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=49_152, hidden_size=576, intermediate_size=1536, num_hidden_layers=args.layers,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg).train()
    B, T = args.rows, args.tokens
    ids = torch.randint(0, cfg.vocab_size, (B, T))
    action = torch.zeros(B, T)
    action[:, T // 4:] = 1
    z = torch.zeros(B)
    batch = Batch(ids_BT=ids, attn_BT=torch.ones(B, T, dtype=torch.long), action_BT=action, weight_B=torch.ones(B),
                  behavior_BT=torch.zeros(B, T), version_BT=torch.zeros(B, T, dtype=torch.long), group_B=torch.arange(B),
                  baseline_B=torch.ones(B, dtype=torch.bool), reward_B=z, truncated_B=z.bool(),
                  length_B=torch.full((B,), T), turn_BT=torch.zeros(B, T, dtype=torch.long),
                  state_BS=torch.zeros(B, 1, dtype=torch.long), failed_BS=torch.zeros(B, 1, dtype=torch.bool),
                  trajectory_ids=[str(i) for i in range(B)])

    def run() -> None:
        if args.impl == "plain":
            logp_all = torch.log_softmax(model(input_ids=ids).logits[:, :-1].float(), dim=-1)
            lp = logp_all.gather(-1, ids[:, 1:, None])[..., 0] * action[:, 1:]
            ent = -(logp_all.exp() * logp_all).sum(-1) * action[:, 1:]
        else:
            out = score_actions(model, batch, temperature=1.0, share_prefix=False)
            lp, ent = out.logprobs_BT, out.entropy_BT
        (lp.sum() + 0.01 * ent.sum()).backward()
        model.zero_grad(set_to_none=True)

    exact = _reset_peak()
    before = _status_kb("VmRSS") or 0
    t0 = time.perf_counter()
    run()
    seconds = time.perf_counter() - t0
    peak = _status_kb("VmHWM") or 0
    print(json.dumps({"peak_mb": (peak - before) / 1024, "seconds": seconds, "exact_peak": exact}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=16)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--label", default="now")
    p.add_argument("--impls", nargs="+", default=["plain", "learner"])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--impl", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    n_act = args.rows * (args.tokens - args.tokens // 4)
    print(f"rows={args.rows} tokens={args.tokens} layers={args.layers} vocab=49152 action positions={n_act} "
          f"(one float32 [rows, T, V] copy = {args.rows * args.tokens * 49152 * 4 / 2**20:.0f} MB) [{args.label}]")
    for impl in args.impls:
        cmd = [sys.executable, __file__, "--child", "--impl", impl, "--rows", str(args.rows), "--tokens",
               str(args.tokens), "--layers", str(args.layers), "--threads", str(args.threads)]
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
        print(f"{impl:<8} peak above start {r['peak_mb']:>7.0f} MB   forward+backward {r['seconds']:>6.2f} s")


if __name__ == "__main__":
    main()
