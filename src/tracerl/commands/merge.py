"""`tracerl merge CHECKPOINT --out DIR`: fold a LoRA checkpoint's adapter into its base weights.

A LoRA run's checkpoints hold only the adapter and a pointer to the base weights (`lora_base.json`);
this writes a plain Hugging Face model (`AutoModelForCausalLM.from_pretrained(DIR)` loads it, no
peft needed) with the tokenizer beside it. The merged model's logits equal the adapted model's up
to float rounding (W + (alpha/r)·BA is added once instead of per forward).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tracerl.errors import UserError


def register(sub) -> None:
    p = sub.add_parser("merge", help="merge a LoRA checkpoint's adapter into a plain Hugging Face model",
                       description="Load CHECKPOINT's base weights (from its lora_base.json), apply the adapter, "
                       "fold it in and save a plain Hugging Face model and tokenizer to --out.")
    p.add_argument("checkpoint", help="a LoRA checkpoint: RUN/checkpoints/step_N of a run with model.lora set")
    p.add_argument("--out", required=True, help="folder to write (must not exist or be empty)")
    p.set_defaults(func=run)


def merge_checkpoint(checkpoint: str | Path, out: str | Path) -> Path:
    from tracerl.models import lora
    from tracerl.models.load import load_adapter_checkpoint
    from tracerl.models.weights import plain_copy

    ckpt, out = Path(checkpoint), Path(out)
    if not ckpt.is_dir():
        raise UserError(f"checkpoint {ckpt} does not exist; give RUN/checkpoints/step_N of a LoRA run")
    if not lora.is_adapter_dir(ckpt):
        raise UserError(f"{ckpt} is not a LoRA checkpoint (no adapter_config.json and lora_base.json); a full "
                        "fine-tuning checkpoint is already a plain Hugging Face model")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out} already exists and is not an empty folder; choose a new folder")
    model, tokenizer = load_adapter_checkpoint(ckpt, trainable=False)
    merged = plain_copy(model)  # the adapter folded into a copy of the base weights
    out.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def run(args) -> int:
    out = merge_checkpoint(args.checkpoint, args.out)
    print(f"wrote the merged model to {out} (load it with AutoModelForCausalLM.from_pretrained)", file=sys.stderr)
    return 0
