"""An in-process vLLM engine (GPU only): token ids in, token ids and behavior log-probs out.

NOT RUN ON THIS PROJECT'S CI (no GPU, vLLM not installable): written against vLLM's documented
offline API (`vllm.LLM`, `SamplingParams`, `TokensPrompt`, `LLM.collective_rpc`) and tested only
by `tests/rollout/test_engine_conformance.py -m gpu` and `benchmarks/gpu_check.sh` on a GPU box.

- `vllm` is imported when the engine is built, never at module import.
- Prompts go in as `TokensPrompt(prompt_token_ids=...)`, one `SamplingParams` per row (its own
  `max_tokens` budget and `seed`, drawn from the caller's generator, so the same generator state
  gives the same tokens), `logprobs=0` (the sampled token's log-prob only), `ignore_eos=True`
  (only the caller's stops end a row), stop strings and ids as `stop` / `stop_token_ids` with
  `include_stop_str_in_output=True`. Each row is then cut at its first stop by the same rule as
  the torch engine (rollout/stops.py), so a stop string spanning tokens ends a row at one token.
- Behavior log-probs: ASSUMPTION — the LLM is built with `logprobs_mode="processed_logprobs"`
  (vLLM >= 0.10.2), whose log-probs are taken after temperature (and penalties / logits
  processors). Older vLLM returns log-probs of the raw distribution; depending on the version
  top-k / top-p masking may not be included in "processed" either. Both differ from what the
  learner scores (algorithms/logprobs.py) unless temperature is 1 and top-p/top-k are off; the
  engine probe (`gates.probe_logprob_diff_max`, run after every sync) measures exactly this, so
  set the gate when training through vLLM. Greedy rows get log-prob 0 (a point mass).
- Entropy of the sampling distribution is not returned by vLLM: each token's entropy is NaN
  (diagnostic metrics become NaN; gates skip NaN).
- Weights by version, no restart: `load_weights(state_dict, version)` hands the learner's
  tensors as a plain model (`engine_api.sync_weights` sends `models/weights.plain_state_dict`: a
  LoRA policy's adapters merged in; HF names; vLLM's loader fuses q/k/v and gate/up itself) to the worker's model
  `load_weights`, in process when vLLM runs its engine core in this process
  (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, which `build` sets), else through `collective_rpc`; then
  the prefix cache is reset so no KV of the old weights is reused.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

import torch

from tracerl.errors import UserError
from tracerl.models.weights import param_dtype
from tracerl.rollout.sampling import Sample, row_seeds
from tracerl.rollout.stops import StopRules, row_budgets


def vllm_problem() -> str | None:
    """Why the vLLM engine cannot run here (one sentence), or None."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return ("engine.name=vllm needs vLLM, which is not installed; install it on a GPU machine with "
                "pip install 'tracerl[vllm]', or use engine.name=torch or hf")
    if not torch.cuda.is_available():
        return "engine.name=vllm needs a CUDA GPU and none is visible; use engine.name=torch or hf on this machine"
    return None


def vllm_model_dir(model) -> str:
    """The directory vLLM loads `model`'s architecture from (its weights are replaced by the learner's at once)."""
    model_dir = getattr(model, "name_or_path", None) or getattr(model.config, "_name_or_path", None)
    if not model_dir:
        raise UserError("engine.name=vllm loads the model from a directory and this model has none; "
                        "give model.path (a local Hugging Face model directory)")
    return str(model_dir)


def vllm_dtype(recipe, model) -> str:
    """vLLM's weight dtype: engine.dtype; else bfloat16 under model.autocast bf16 (vLLM has no autocast; bf16
    weights are its nearest), else the learner's parameter dtype."""
    if recipe.engine.dtype:
        return recipe.engine.dtype
    if getattr(recipe.model, "autocast", None) == "bf16":
        return "bfloat16"
    return param_dtype(model)


def _load_into_worker(worker, weights):  # runs inside a vLLM worker (collective_rpc)
    worker.model_runner.model.load_weights(weights=weights)
    return True


class VLLMEngine:
    owns_weights = True

    def __init__(self, llm, tokenizer):
        self.llm, self.tokenizer = llm, tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self.version = 0
        self._stops = StopRules(tokenizer)

    @classmethod
    def build(cls, model_dir: str, tokenizer, *, dtype: str, seed: int, gpu_memory_utilization: float,
              max_model_len: int, enforce_eager: bool = False) -> VLLMEngine:
        problem = vllm_problem()
        if problem:
            raise UserError(problem)
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine core in this process: direct weight loads
        import inspect

        from vllm import LLM

        kw = dict(model=str(model_dir), tokenizer=str(model_dir), dtype=dtype, seed=seed,
                  gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                  enforce_eager=enforce_eager, enable_prefix_caching=True)
        if "logprobs_mode" in inspect.signature(LLM.__init__).parameters or _engine_args_have("logprobs_mode"):
            kw["logprobs_mode"] = "processed_logprobs"
        return cls(LLM(**kw), tokenizer)

    def open_session(self):
        from tracerl.rollout.engine import StatelessSession

        return StatelessSession(self)  # vLLM's prefix cache reuses each episode's earlier turns

    def load_weights(self, state_dict, version: int) -> None:
        if state_dict is not None:
            weights = [(k, v.detach()) for k, v in state_dict.items()]
            model = _in_process_model(self.llm)
            if model is not None:
                model.load_weights(weights=weights)
            else:
                self.llm.collective_rpc(_load_into_worker, args=([(k, v.cpu()) for k, v in weights],))
            self.llm.reset_prefix_cache()
        self.version = int(version)

    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int | Sequence[int],
                 temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 stop_strings: tuple[str, ...] = (), stop_token_ids: Sequence[int] = (),
                 generator: torch.Generator | None = None) -> list[Sample]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        B = len(prompts)
        budgets = row_budgets(max_new_tokens, B)
        seeds = row_seeds(B, generator)
        greedy = temperature == 0.0
        params = [SamplingParams(max_tokens=b, temperature=float(temperature), top_p=1.0 if greedy else float(top_p),
                                 top_k=-1 if (greedy or not top_k) else int(top_k), seed=int(s), logprobs=0,
                                 ignore_eos=True, stop=list(stop_strings) or None,
                                 stop_token_ids=list(stop_token_ids) or None, include_stop_str_in_output=True,
                                 skip_special_tokens=False)
                  for b, s in zip(budgets, seeds)]
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=[int(t) for t in p]) for p in prompts], params,
                                 use_tqdm=False)
        rule = self._stops.rule(stop_strings, stop_token_ids)
        samples = []
        for out, budget in zip(outs, budgets):
            comp = out.outputs[0]
            ids, lps = [], []
            for j, t in enumerate(comp.token_ids):
                ids.append(int(t))
                lps.append(0.0 if greedy else _sampled_logprob(comp.logprobs, j, int(t)))
                if rule(ids, int(t)) or len(ids) >= budget:
                    break
            stopped = bool(ids) and rule(ids, ids[-1])
            samples.append(Sample(ids, lps, "stop" if stopped else "length", [math.nan] * len(ids)))
        return samples


def _sampled_logprob(logprobs, j: int, token: int) -> float:
    entry = logprobs[j][token]  # {token id: Logprob} per position; logprobs=0 holds the sampled token
    value = float(getattr(entry, "logprob", entry))
    return value if math.isfinite(value) else 0.0


def _in_process_model(llm):
    """The worker's torch model when vLLM runs in this process (V1 without multiprocessing, or V0)."""
    executor = getattr(getattr(llm, "llm_engine", None), "model_executor", None)
    worker = getattr(executor, "driver_worker", None)
    for path in (("worker", "model_runner", "model"), ("model_runner", "model")):
        obj = worker
        for name in path:
            obj = getattr(obj, name, None)
        if obj is not None and hasattr(obj, "load_weights"):
            return obj
    return None


def _engine_args_have(name: str) -> bool:
    try:
        import dataclasses

        from vllm.engine.arg_utils import EngineArgs

        return name in {f.name for f in dataclasses.fields(EngineArgs)}
    except Exception:
        return False
