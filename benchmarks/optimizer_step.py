"""AdamW step time on a real model's parameters: torch's default (on CPU a loop over the parameters, a few
elementwise passes each; what tracerl uses: train/optim.py) against the fused kernel, interleaved in one process,
and how far apart the parameters they produce are after the same steps (docs/performance.md: why fused is not the
default yet).

    .venv/bin/python benchmarks/optimizer_step.py [--threads 1] [--steps 5] [--model /tmp/tracerl_smollm2_hf]

The model is SmolLM2-135M-Instruct (converted once from the `smollm2` recipe's GGUF, as benchmarks/vs_trl_real.py
does), or any local Hugging Face model folder. Gradients are fixed random tensors (the step's cost does not depend
on their values). Prints the median seconds per step of each and their ratio.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))


def _model(path: str):
    from vs_trl_real import convert

    from tracerl.models import load_model_and_tokenizer

    return load_model_and_tokenizer(convert(path))[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="/tmp/tracerl_smollm2_hf")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    base = _model(args.model)
    arms = {}
    for name, kw in (("default", {}), ("fused", {"fused": True})):
        m = copy.deepcopy(base)
        params = [p for p in m.parameters() if p.requires_grad]
        gen = torch.Generator().manual_seed(0)
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype) * 1e-3
        arms[name] = (params, torch.optim.AdamW(params, lr=3e-5, betas=(0.9, 0.95), weight_decay=0.0, **kw))
    times = {name: [] for name in arms}
    for step in range(args.steps + 1):
        for name, (_, opt) in arms.items():
            t0 = time.perf_counter()
            opt.step()
            if step:  # the first step allocates the moments
                times[name].append(time.perf_counter() - t0)
    n = sum(p.numel() for p in arms["default"][0])
    diff = max(float((a - b).abs().max()) for a, b in zip(arms["default"][0], arms["fused"][0]))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{n / 1e6:.1f}M parameters, {args.threads} thread(s), {args.steps} steps: default {med['default']:.3f} s/step, "
          f"fused {med['fused']:.3f} s/step, default / fused {med['default'] / med['fused']:.2f}x; "
          f"largest parameter difference after {args.steps + 1} steps {diff:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
