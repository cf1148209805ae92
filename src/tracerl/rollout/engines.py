"""Build the rollout engine a recipe's `engine:` section names (config/engine.py, docs/engines.md)."""

from __future__ import annotations

import torch

from tracerl.errors import UserError
from tracerl.models.precision import set_autocast
from tracerl.models.weights import engine_copy, param_dtype
from tracerl.rollout.engine import TorchEngine


def engine_problem(cfg, device=None) -> str | None:
    """Why `cfg` cannot run on this machine (one sentence), or None; checked before a run writes anything.
    `device`: where the engine samples (the learner's device), where it matters."""
    if cfg.prepack:
        from tracerl.models.prepack import prepack_available

        if device is not None and torch.device(device).type != "cpu":
            return (f"engine.prepack packs weights for a CPU's matmul libraries and the engine runs on {device}; "
                    "unset engine.prepack or set model.device=cpu")
        if cfg.prepack == "float16":
            from tracerl.models.prepack import fp16_packs_available

            if not fp16_packs_available():
                return ("engine.prepack float16 needs fbgemm's fp16-weight matmul (an x86 CPU with AVX2), which this "
                        "machine or torch lacks; set engine.prepack=true or unset it")
        elif not prepack_available():
            return ("engine.prepack needs a torch built with MKL and oneDNN (the packed-weight kernels), which this "
                    "torch lacks; unset engine.prepack")
    if cfg.name == "vllm":
        from tracerl.rollout.vllm_engine import vllm_problem

        return vllm_problem()
    return None


def copy_precision(cfg, learner_dtype, autocast: str | None) -> tuple:
    """(dtype, autocast) of a torch engine's own copy: `engine.dtype` (else the learner's) under the model's
    autocast; with `engine.prepack: float16` a float32 copy without autocast (its linear layers multiply float32
    activations by float16-packed weights, which an autocast to bfloat16 would bypass)."""
    if cfg.prepack == "float16":
        return "float32", None
    return cfg.dtype or learner_dtype, autocast


def warn_slow_bf16(dtype, device) -> None:
    """A bfloat16 engine on a CPU without oneDNN's bfloat16 kernels (AVX2 only) decodes on emulated bf16: on
    SmolLM2-135M, 16 rows, one thread, 563 ms a step against float32's 137 ms (docs/performance_smollm2.md)."""
    import warnings

    from tracerl.models.prepack import bf16_packs_available

    if dtype == torch.bfloat16 and torch.device(device or "cpu").type == "cpu" and not bf16_packs_available():
        warnings.warn("engine.dtype bfloat16 on a CPU without bfloat16 matmul kernels (no AVX-512 BF16, "
                      "AVX-NE-CONVERT or AMX): decoding is several times slower than float32 here; "
                      "set engine.dtype=float32", RuntimeWarning, stacklevel=3)


def lean_decode_problem(lean_decode: bool | None, model) -> str | None:
    """Why `engine.lean_decode: true` cannot hold for the engine's `model` (one sentence), or None."""
    if lean_decode is not True:
        return None
    from tracerl.rollout.lean_decode import lean_problem

    problem = lean_problem(model)
    return f"engine.lean_decode is true but {problem}; unset engine.lean_decode (the HF forward decodes)" \
        if problem else None


def _lean_checked(cfg, engine: TorchEngine) -> TorchEngine:
    problem = lean_decode_problem(cfg.lean_decode, engine.model)
    if problem:
        raise UserError(problem)
    return engine


def build_engine(cfg, model, tokenizer, *, seed: int = 0, max_model_len: int = 4096, device=None):
    """The engine of `cfg` over the learner `model` (the torch engine shares it, on `device`, default the
    CPU, or samples its own copy in `cfg.dtype`, or on packed weights under `cfg.prepack`; hf copies it
    where it lies; vllm loads its own)."""
    problem = engine_problem(cfg, device)
    if problem:
        raise UserError(problem)
    if cfg.name == "torch":
        dtype, _ = copy_precision(cfg, param_dtype(model), None)
        lean = cfg.lean_decode is not False
        if dtype == param_dtype(model) and not cfg.prepack:  # the learner's module: a sync is a version bump
            return _lean_checked(cfg, TorchEngine(model, tokenizer, device=device or "cpu", threads=cfg.threads,
                                                  lean_decode=lean))
        warn_slow_bf16(getattr(torch, dtype) if isinstance(dtype, str) else dtype, device)
        copy = engine_copy(model, dtype, device)  # a copy of its own: another dtype, or packed weights
        if cfg.prepack == "float16":  # without autocast (copy_precision)
            copy = set_autocast(copy, None)
        if cfg.prepack:
            from tracerl.models.prepack import prepack

            prepack(copy, half=cfg.prepack == "float16")
        return _lean_checked(cfg, TorchEngine(copy, tokenizer, device=device or "cpu", owns_weights=True,
                                              threads=cfg.threads, lean_decode=lean))
    if cfg.name == "hf":
        from tracerl.rollout.hf_engine import HFGenerateEngine

        return HFGenerateEngine.from_learner(model, tokenizer, dtype=cfg.dtype)
    from tracerl.models.weights import plain_state_dict
    from tracerl.rollout.vllm_engine import VLLMEngine, vllm_model_dir

    model_dir = vllm_model_dir(model)
    dtype = cfg.dtype or param_dtype(model)
    engine = VLLMEngine.build(model_dir, tokenizer, dtype=dtype, seed=seed,
                              gpu_memory_utilization=cfg.gpu_memory_utilization,
                              max_model_len=cfg.max_model_len or max_model_len, enforce_eager=cfg.enforce_eager)
    engine.load_weights(plain_state_dict(model), 0)  # the learner's weights (LoRA merged), whatever the directory holds
    return engine
