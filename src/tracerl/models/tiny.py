"""The built-in tiny model and tokenizer: built locally, deterministically, in seconds.

The tokenizer is a byte-level BPE trained with `tokenizers` on the environment's own text
(prompts, expert actions, tool outputs), digit runs pre-split from letters so a number is the same
token(s) wherever it appears (in a sentence, in code, in a tool output), optionally one token per
digit (`individual_digits`), the environment's tool tags
kept whole, and a ChatML chat template. The model is a small Llama-architecture causal LM from a
config. Both are saved in Hugging Face format and load with the Auto* classes.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIALS = ("<|pad|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tokenizer(texts: Iterable[str], *, vocab_size: int, tags: Iterable[str] = (),
                    individual_digits: bool = False) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=individual_digits),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(sorted(set(texts)), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|endoftext|>",
                                   bos_token=None, unk_token=None)
    fast.add_tokens(sorted(set(tags)))  # whole tags, decoded as text (not special)
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(vocab_size: int, *, hidden_size: int, num_layers: int, num_heads: int,
                intermediate_size: int, max_positions: int, seed: int, pad_token_id: int,
                eos_token_id: int) -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_heads,
        max_position_embeddings=max_positions, tie_word_embeddings=True, rms_norm_eps=1e-5,
        pad_token_id=pad_token_id, eos_token_id=eos_token_id, bos_token_id=None,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model


def build_tiny(out_dir: str | Path, texts: Iterable[str], *, tags: Iterable[str], vocab_size: int,
               hidden_size: int, num_layers: int, num_heads: int, intermediate_size: int,
               max_positions: int, seed: int, individual_digits: bool = False) -> Path:
    """Train the tokenizer, initialise the model, save both to `out_dir` (HF format)."""
    out = Path(out_dir)
    tok = build_tokenizer(texts, vocab_size=vocab_size, tags=tags, individual_digits=individual_digits)
    model = build_model(len(tok), hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads,
                        intermediate_size=intermediate_size, max_positions=max_positions, seed=seed,
                        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    tok.save_pretrained(out)
    model.save_pretrained(out, safe_serialization=True)
    return out
