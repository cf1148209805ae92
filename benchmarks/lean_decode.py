"""The engine's decode steps on SmolLM2-135M through the lean step (`engine.lean_decode`) against the HF forward.

    .venv/bin/python benchmarks/lean_decode.py [--hf-dir /tmp/tracerl_smollm2_hf] [--rows 16] [--dtype bfloat16]
        [--threads 1] [--prompt 120] [--steps 24] [--reps 3] [--no-prepack]

Two torch engines over one model, `lean_decode=True` and `False`, sample the same rows from the same prompts under
the same seed through a generation session (kv_session.py): the tokens and behaviour log-probs must be equal (the
lean step computes the forward's logits bit for bit), and the time of a decode step (median over the steps,
prefill excluded) is printed for each, `--reps` times interleaved, then the median of the per-repetition ratios.
Every row samples `--steps` tokens (no stop), prompts of `--prompt` random tokens.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))


def timed_session(engine, prompts, steps: int) -> tuple[float, list]:
    """Median ms of a decode step of one session call, and its samples."""
    import tracerl.rollout.kv_session as kv

    times, real = [], kv.sample_next

    def clocked(*a, **k):  # one call per decode step, before its forward: the gaps between calls are the steps
        times.append(time.perf_counter())
        return real(*a, **k)

    kv.sample_next = clocked
    try:
        out = kv.GenerationSession(engine).generate(list(range(len(prompts))), prompts, max_new_tokens=steps,
                                                    generator=torch.Generator().manual_seed(0), temperature=1.0)
    finally:
        kv.sample_next = real
    gaps = [b - a for a, b in zip(times, times[1:])]
    return statistics.median(gaps[2:]) * 1e3, out


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
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from vs_trl_real import convert

    from tracerl.models.prepack import prepack
    from tracerl.rollout import TorchEngine

    hf_dir = convert(args.hf_dir)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=getattr(torch, args.dtype)).eval()
    tok = AutoTokenizer.from_pretrained(hf_dir)
    if not args.no_prepack:
        prepack(model)
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(100, 1000, (args.rows, args.prompt), generator=g).tolist()
    lean, plain = TorchEngine(model, tok, lean_decode=True), TorchEngine(model, tok, lean_decode=False)
    print(f"{args.dtype}, {args.rows} rows, {args.threads} thread(s), prepack {not args.no_prepack}")
    hf_ms, lean_ms = [], []
    with torch.inference_mode():
        for _ in range(args.reps):
            a, ref = timed_session(plain, prompts, args.steps)
            b, got = timed_session(lean, prompts, args.steps)
            same = all(x.token_ids == y.token_ids and x.logprobs == y.logprobs for x, y in zip(got, ref))
            hf_ms.append(a)
            lean_ms.append(b)
            print(f"  HF forward {a:.1f} ms a step, lean {b:.1f} ms a step; tokens and log-probs equal: {same}")
            if not same:
                raise SystemExit("lean_decode.py: the lean step sampled other tokens or log-probs than the HF forward")
    print(f"median: HF {statistics.median(hf_ms):.1f} ms, lean {statistics.median(lean_ms):.1f} ms, "
          f"HF / lean {statistics.median(a / b for a, b in zip(hf_ms, lean_ms)):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
