"""Learner throughput, packed vs padded, on a batch of mixed lengths: action tokens per second of one policy
update (score with gradient, GRPO loss, backward, AdamW step), the two interleaved in one process.

    .venv/bin/python benchmarks/packing.py [--rows 32] [--min-len 32] [--max-len 384] [--reps 3] [--threads 1]

A random Llama (`--hidden`, `--layers`, `--vocab`; defaults: the tiny recipe model's 144 / 4 / 512) and
`--rows` rows of lengths uniform in [min, max], the last three quarters of each row ACTION tokens, distinct
prompts (the shared-prefix split has nothing to share; it is off in both arms). `padded`: `learner.packing`
false; `packed`: true (train/packing.py); `packed+micro`: packed with `--micro` tokens per micro-batch.
Prints the median seconds per update and action tokens/s of each arm, and packed / padded.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch


def build(args):
    from transformers import LlamaConfig, LlamaForCausalLM

    from tracerl.algorithms.batch import Batch

    torch.manual_seed(0)
    heads = max(1, args.hidden // 36)
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=3 * args.hidden,
                      num_hidden_layers=args.layers, num_attention_heads=heads, num_key_value_heads=heads,
                      max_position_embeddings=2048, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(args.min_len, args.max_len + 1, (args.rows,), generator=g)
    B, T = args.rows, int(lengths.max())
    ids = torch.randint(0, args.vocab, (B, T), generator=g)
    attn = (torch.arange(T)[None] < lengths[:, None]).long()
    action = ((torch.arange(T)[None] >= (lengths // 4)[:, None]) & attn.bool()).float()
    z = torch.zeros(B)
    batch = Batch(ids_BT=ids * attn, attn_BT=attn, action_BT=action, weight_B=torch.ones(B),
                  behavior_BT=torch.where(action > 0, torch.full((B, T), -6.0), torch.nan),
                  version_BT=torch.zeros(B, T, dtype=torch.long), group_B=torch.arange(B) // 8,
                  baseline_B=torch.ones(B, dtype=torch.bool), reward_B=(torch.arange(B) % 2).float(), truncated_B=z.bool(),
                  length_B=lengths, turn_BT=torch.zeros(B, T, dtype=torch.long),
                  state_BS=torch.zeros(B, 1, dtype=torch.long), failed_BS=torch.zeros(B, 1, dtype=torch.bool),
                  trajectory_ids=[str(i) for i in range(B)])
    return model, batch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--min-len", type=int, default=32)
    p.add_argument("--max-len", type=int, default=384)
    p.add_argument("--hidden", type=int, default=144)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--micro", type=int, default=2048)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    from tracerl.algorithms.spec import ALGORITHMS, StepContext
    from tracerl.train.roles import PolicyRole

    model, batch = build(args)
    algo = ALGORITHMS["grpo"]()
    adv_BT, _ = algo.advantages(batch, batch.reward_B, {})
    sampling = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}
    arms = {"padded": {}, "packed": {"packing": True},
            "packed+micro": {"packing": True, "max_tokens_per_micro_batch": args.micro}}
    roles = {n: PolicyRole(copy.deepcopy(model), lr=1e-6, max_grad_norm=1.0, sampling=sampling, share_prefix=False, **kw)
             for n, kw in arms.items()}
    n_action = int(batch.action_BT.sum())
    L = batch.length_B
    print(f"rows={args.rows} lengths {int(L.min())}-{int(L.max())} (mean {L.float().mean():.0f}; padded width "
          f"{batch.ids_BT.shape[1]}: {float(L.sum()) / (args.rows * batch.ids_BT.shape[1]):.0%} real tokens), "
          f"action tokens {n_action}, model hidden {args.hidden} x {args.layers} layers, vocab {args.vocab}, "
          f"threads {args.threads}")
    times: dict[str, list[float]] = {n: [] for n in arms}
    for rep in range(args.reps + 1):  # the first round warms up and is not counted
        for name, role in roles.items():
            t0 = time.perf_counter()
            role.train_steps(algo, batch, batch.reward_B, {}, adv_BT, [torch.arange(args.rows)], minibatches=1,
                             ctx=StepContext(max_tokens=args.max_len))
            if rep:
                times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["padded"])
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:<13} {m:7.3f} s/update  {n_action / m:8.0f} action tokens/s  x{base / m:.2f} vs padded")


if __name__ == "__main__":
    main()
