"""The `model:` section of a recipe: which model and tokenizer (a local path, a GGUF file or the built-in
tiny model), and where it runs and how it is trained: devices, autocast, gradient checkpointing, LoRA
(docs/training.md, "Devices, precision and LoRA"); `models/device.py`, `models/precision.py` and
`models/lora.py` act on the placement keys.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tracerl.config.base import Cfg

DEVICE_PATTERN = r"^(auto|cpu|cuda(:[0-9]{1,3})?)$"
"""`auto` (cuda when torch sees one, else cpu), `cpu`, `cuda` or `cuda:N`."""


class LoraSettings(Cfg):
    r: int = Field(8, gt=0, le=4096)
    """Rank of each adapter (A: r × in, B: out × r; B starts at zero, so the adapted model starts as the base)."""
    alpha: float = Field(16.0, gt=0)
    """Scale numerator: the update is (alpha / r) · B A."""
    dropout: float = Field(0.0, ge=0, lt=1)
    """Dropout on the adapter's input while training (off in rollouts and scoring, which run in eval mode)."""
    target_modules: list[str] | Literal["all-linear"] = "all-linear"
    """Module names (the last part, e.g. q_proj, v_proj) that get an adapter; `all-linear` is every linear
    layer but the output layer."""


class PlacementFields(Cfg):
    """The fields `ModelConfig` inherits (documented once here)."""

    device: str = Field("auto", pattern=DEVICE_PATTERN)
    """Device of the policy and the rollout engine (they share the weights): auto (cuda when available,
    else cpu), cpu, cuda or cuda:N. Roles name their own (`roles.*.device`, `model.reference_device`)."""
    reference_device: str | None = Field(None, pattern=DEVICE_PATTERN)
    """Device of the frozen KL reference; null is `model.device`. With LoRA the reference is the policy
    with its adapter disabled, so it lives where the policy does."""
    autocast: Literal["bf16"] | None = None
    """bf16 autocast around every model forward (rollout engine, learner scoring, SFT, critic); weights
    and optimizer state stay in `model.dtype`. Null runs in `model.dtype` throughout."""
    attention: Literal["auto", "sdpa", "eager"] = "auto"
    """Attention implementation of the learner-side models (policy, critic, reference; Hugging Face
    `set_attn_implementation`). auto: eager where the model computes in bf16 on a CPU (faster forward +
    backward than torch's CPU flash-attention kernel there), the architecture's own choice elsewhere. Rollout
    copies of the weights keep the architecture's choice (sdpa decodes faster)."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass (Hugging Face
    gradient_checkpointing_enable, non-reentrant): less learner memory, about one more forward of time."""
    lora: LoraSettings | None = None
    """LoRA adapters through peft (`pip install 'tracerl[lora]'`); null trains every weight. The adapter is
    attached at load for `model.path`, and after the SFT stages that train the freshly built tiny model
    (LoRA on a random init learns little)."""


class TinyModelConfig(Cfg):
    hidden_size: int = Field(128, ge=1, le=1 << 16)
    """Width of the built-in tiny Llama-architecture model."""
    num_layers: int = Field(4, ge=1, le=256)
    """Transformer blocks."""
    num_heads: int = Field(4, ge=1, le=1024)
    """Attention heads."""
    intermediate_size: int = Field(384, ge=1, le=1 << 18)
    """MLP width."""
    vocab_size: int = Field(512, ge=64, le=1 << 20)
    """Target BPE vocabulary size of the locally trained tokenizer."""
    max_positions: int = Field(512, ge=8, le=1 << 20)
    """Maximum sequence length."""
    individual_digits: bool = False
    """One token per digit (as the Llama, Qwen and DeepSeek tokenizers split numbers), so copying a
    number is copying digits the model sees everywhere; false: BPE merges digit runs into tokens
    ("81"), each a rare token only the numbers that use it teach."""

    @model_validator(mode="after")
    def _heads_divide_width(self) -> TinyModelConfig:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"model.tiny.hidden_size ({self.hidden_size}) must be a multiple of "
                             f"model.tiny.num_heads ({self.num_heads})")
        return self


class ModelConfig(PlacementFields):
    path: str | None = None
    """Local directory of a Hugging Face causal LM and tokenizer; null builds the tiny model."""
    gguf_file: str | None = None
    """GGUF file name inside `path`, loaded through transformers' gguf support."""
    tiny: TinyModelConfig = Field(default_factory=TinyModelConfig)
    """Shape of the built-in tiny model (used when `path` is null)."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Parameter dtype for training and sampling."""
    chat_template: Literal["auto", "hermes"] = "auto"
    """The chat template. auto: the tokenizer's own (in native tool mode, tracerl's Hermes template when the
    tokenizer has none). hermes: tracerl's documented Hermes-style ChatML template with tool support
    (models/chat_templates.py, docs/tools.md), for models whose template cannot render tools; it is
    saved with every checkpoint's tokenizer."""
