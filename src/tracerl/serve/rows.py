"""The samples of one call: one row through the batching worker, or `n` rows, a constrained pattern,
`top_logprobs` or a logit adjustment (`logit_bias`, penalties: serve/penalties.py) as one engine batch of
their own under the worker's lock (so the policy version read there tags exactly the weights that sampled
them, and top log-probs are scored under the same weights). A pattern or an adjustment samples through
`constrained_generate`, the loop that can change each step's logits."""

from __future__ import annotations

import torch

from tracerl.serve.batcher import EngineTimeout
from tracerl.serve.constrained import constrained_generate, rescore_top
from tracerl.serve.errors import bad_request


def sample_rows(gw, prompt: list[int], budget: int, sampling: dict, stops: tuple[str, ...], seed: int | None,
                stop_ids: tuple[int, ...], *, n: int = 1, pattern=None, top_logprobs: int = 0,
                adjust=None) -> list[tuple]:
    """[(Sample, policy version, top log-probs per token or None)] for the `n` samples of one call."""
    if n == 1 and pattern is None and not top_logprobs and adjust is None:
        sample, version = gw.worker.submit(prompt, budget, sampling, stops, seed, stop_ids)
        return [(sample, version, None)]
    engine = gw.engine
    if getattr(engine, "model", None) is None or (pattern is not None and not hasattr(engine, "_cache_of")):
        raise bad_request("this engine samples no constrained rows or top log-probs; drop tool_choice, "
                          "response_format and top_logprobs", param="tool_choice")
    if adjust is not None and not hasattr(engine, "_cache_of"):
        raise bad_request("this engine cannot change its logits per call; drop logit_bias, presence_penalty and "
                          "frequency_penalty", param="logit_bias")
    worker = gw.worker
    gen = torch.Generator().manual_seed(seed) if seed is not None else worker._gen
    all_stops = list(dict.fromkeys([engine.tokenizer.eos_token_id, *stop_ids]))
    if not worker.lock.acquire(timeout=worker.timeout_s):  # every wait has a timeout (503 engine_timeout)
        raise EngineTimeout(f"the engine stayed busy for {worker.timeout_s:g} s")
    try:
        version = worker.policy_version
        if pattern is None and adjust is None:
            samples = engine.generate([prompt] * n, max_new_tokens=budget, stop_strings=stops, stop_token_ids=all_stops,
                                      generator=gen, **sampling)
            tops = [rescore_top(engine, prompt, s.token_ids, sampling, top_logprobs) if top_logprobs else None
                    for s in samples]
        else:
            pairs = constrained_generate(engine, [prompt] * n, [pattern] * n, budgets=[budget] * n, stop_strings=stops,
                                         stop_token_ids=all_stops, generator=gen, top_logprobs=top_logprobs,
                                         adjust=adjust, **sampling)
            samples, tops = [p[0] for p in pairs], [p[1] if top_logprobs else None for p in pairs]
        worker.batches += 1
        worker.rows += n
    finally:
        worker.lock.release()
    return [(s, version, t) for s, t in zip(samples, tops)]
