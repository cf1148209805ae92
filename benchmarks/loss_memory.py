"""Peak memory and time of token log-probabilities + entropy for a large vocabulary: naive vs chunked.

    .venv/bin/python benchmarks/loss_memory.py [--tokens 1024] [--hidden 256] [--vocab 151936] [--chunk 128]

Each measurement runs in a fresh subprocess (CPU). Inputs (hidden states, LM-head weight, targets) are
built first; then the process's peak-RSS counter is reset (Linux /proc/self/clear_refs, falling back
to getrusage) and the computation runs once. "peak" is the resident-set high-water mark above the
resident size just before the computation, i.e. what the computation itself needed. Time is the best
of `--repeats` further runs. Two cases: forward only (under no_grad, as for old/reference
log-probabilities) and forward + backward into the hidden states and LM head (training).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def child(args: argparse.Namespace) -> None:
    import torch

    from tracerl.algorithms.logprobs import naive_token_logprobs_and_entropy, token_logprobs_and_entropy

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(1, args.tokens, args.hidden, generator=g) / args.hidden**0.5
    weight = torch.randn(args.vocab, args.hidden, generator=g)
    targets = torch.randint(0, args.vocab, (1, args.tokens), generator=g)
    backward = args.case == "train"
    hidden.requires_grad_(backward)
    weight.requires_grad_(backward)

    def run() -> None:
        with torch.set_grad_enabled(backward):
            if args.impl == "naive":
                lp, ent = naive_token_logprobs_and_entropy(hidden, targets, lm_head=weight)
            else:
                lp, ent = token_logprobs_and_entropy(hidden, targets, lm_head=weight, chunk_size=args.chunk)
            if backward:
                (lp.sum() + 0.01 * ent.sum()).backward()
                hidden.grad = weight.grad = None

    exact = _reset_peak()
    before = _status_kb("VmRSS") or 0
    if not exact:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    run()
    peak = (_status_kb("VmHWM") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) or 0
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"peak_mb": (peak - before) / 1024, "seconds": min(times), "exact_peak": exact}))


def measure(args: argparse.Namespace, impl: str, case: str) -> dict:
    cmd = [sys.executable, __file__, "--child", "--impl", impl, "--case", case, "--tokens", str(args.tokens),
           "--hidden", str(args.hidden), "--vocab", str(args.vocab), "--chunk", str(args.chunk),
           "--repeats", str(args.repeats)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--vocab", type=int, default=151_936)
    p.add_argument("--chunk", type=int, default=128)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--impl", choices=("naive", "chunked"), help=argparse.SUPPRESS)
    p.add_argument("--case", choices=("forward", "train"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    logits_mb = args.tokens * args.vocab * 4 / 2**20
    print(f"tokens={args.tokens} hidden={args.hidden} vocab={args.vocab} chunk={args.chunk} "
          f"(one float32 logits copy = {logits_mb:.0f} MB)")
    print(f"{'case':<8} {'naive MB':>9} {'chunked MB':>11} {'peak ratio':>11} {'naive s':>8} {'chunked s':>10} {'time ratio':>11}")
    worst = 0.0
    for case in ("forward", "train"):
        n, c = measure(args, "naive", case), measure(args, "chunked", case)
        ratio = c["peak_mb"] / n["peak_mb"]
        worst = max(worst, ratio)
        print(f"{case:<8} {n['peak_mb']:>9.0f} {c['peak_mb']:>11.0f} {ratio:>11.3f} {n['seconds']:>8.2f} "
              f"{c['seconds']:>10.2f} {c['seconds'] / n['seconds']:>11.2f}")
    verdict = "meets" if worst <= 0.25 else "MISSES"
    print(f"chunked peak / naive peak, worst case: {worst:.3f} ({verdict} the <= 0.25 target)")


if __name__ == "__main__":
    main()
