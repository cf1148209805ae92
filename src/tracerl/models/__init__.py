"""Models and tokenizers: any local Hugging Face causal LM, or the built-in tiny one."""

from tracerl.models.load import load_model_and_tokenizer, model_sha256, tokenizer_hashes
from tracerl.models.tiny import build_tiny

__all__ = ["build_tiny", "load_model_and_tokenizer", "model_sha256", "tokenizer_hashes"]
