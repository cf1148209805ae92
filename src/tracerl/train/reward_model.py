"""A reward model trained from preference pairs (Bradley–Terry): a causal LM backbone and a scalar head.

    tracerl reward-model prefs.jsonl --out rm/          # {"prompt": ..., "chosen": ..., "rejected": ...} per line
    # recipe: roles: {reward_model: {path: rm/, weight: 1.0}}

The model reads (prompt, response) as the backbone's chat template renders a user turn and an
assistant turn (plain `prompt + "\\n" + response` for a tokenizer without one), keeps the last
`max_tokens` tokens, and its score r is a linear head on the last layer's hidden state at the last
token. Training minimises the Bradley–Terry loss over the pairs,

    L = mean_i  -log σ(r(prompt_i, chosen_i) - r(prompt_i, rejected_i)),

with AdamW over backbone and head. The backbone is the built-in tiny model (its tokenizer trained on
the pairs' text) or a local Hugging Face causal LM (`--base`). The folder written holds the
backbone (`backbone/`, Hugging Face format), the head (`head.safetensors`) and `reward_model.json`
(what it was trained on and how: data SHA-256, pairs, epochs, final loss and pair accuracy), so
loading it runs no code (safetensors and JSON only). `train/reward_model_role.py` calibrates it on
an environment's audit set and uses it as the `reward_model` reward component of an RL run.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from tracerl.errors import UserError

META = "reward_model.json"
HEAD = "head.safetensors"
BACKBONE = "backbone"
KIND = "bradley_terry"


def bt_loss(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """The Bradley–Terry loss: mean of -log σ(r_chosen - r_rejected) (softplus form, stable for any margin)."""
    return torch.nn.functional.softplus(rejected - chosen).mean()


def read_pairs(path: str | Path) -> list[tuple[str, str, str]]:
    """(prompt, chosen, rejected) per line of a JSONL file; a bad line is one sentence naming it."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"preference file {p} does not exist; give a JSONL of {{prompt, chosen, rejected}} rows")
    out = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise UserError(f"{p} line {n} is not JSON; each line is one {{prompt, chosen, rejected}} object") from None
        if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in ("prompt", "chosen", "rejected")):
            raise UserError(f"{p} line {n} needs string fields prompt, chosen and rejected")
        if row["chosen"] == row["rejected"]:
            raise UserError(f"{p} line {n} has the same chosen and rejected response; a preference needs two")
        out.append((row["prompt"], row["chosen"], row["rejected"]))
    if not out:
        raise UserError(f"{p} has no preference pairs; add {{prompt, chosen, rejected}} rows")
    return out


def rm_text(tokenizer, prompt: str, response: str) -> str:
    """What the reward model reads: a user turn and an assistant turn through the chat template."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template([{"role": "user", "content": prompt},
                                              {"role": "assistant", "content": response}], tokenize=False)
    return f"{prompt}\n{response}"


class RewardModel(torch.nn.Module):
    """Backbone + scalar head; `forward(texts)` is one score per text."""

    def __init__(self, backbone, tokenizer, head: torch.nn.Linear, max_tokens: int = 256):
        super().__init__()
        self.backbone, self.tokenizer, self.head, self.max_tokens = backbone, tokenizer, head, max_tokens

    def encode(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        rows = [list(self.tokenizer(t, add_special_tokens=False)["input_ids"])[-self.max_tokens:] or [0] for t in texts]
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        return ids, mask

    def forward(self, texts: list[str]) -> torch.Tensor:
        ids, mask = self.encode(texts)
        device = next(self.backbone.parameters()).device
        body = getattr(self.backbone, "base_model", self.backbone)  # the transformer without its LM head
        hidden = body(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state  # [batch, width, hidden]
        last = mask.sum(1).to(device) - 1  # right padding: the last real token of each row
        pooled = hidden[torch.arange(hidden.shape[0], device=device), last]
        return self.head(pooled.to(self.head.weight.dtype)).squeeze(-1)

    @torch.no_grad()
    def score(self, pairs: list[tuple[str, str]], batch_size: int = 16) -> list[float]:
        """r(prompt, response) per pair (eval mode)."""
        was = self.training
        self.eval()
        out: list[float] = []
        for i in range(0, len(pairs), batch_size):
            out += self([rm_text(self.tokenizer, q, r) for q, r in pairs[i:i + batch_size]]).float().tolist()
        self.train(was)
        return out


@dataclass
class TrainResult:
    path: Path
    pairs: int
    epochs: int
    final_loss: float
    pair_accuracy: float  # share of training pairs with r(chosen) > r(rejected) after training


def _tiny_backbone(out: Path, pairs, seed: int, max_tokens: int):
    from tracerl.models import build_tiny, load_model_and_tokenizer

    corpus = [t for p in pairs for t in p]
    path = build_tiny(out, corpus, tags=(), vocab_size=320, hidden_size=64, num_layers=2, num_heads=2,
                      intermediate_size=128, max_positions=max(512, 2 * max_tokens), seed=seed)
    return load_model_and_tokenizer(path)


def train_reward_model(data: str | Path, out: str | Path, *, base: str | None = None, epochs: int = 20,
                       lr: float = 1e-3, batch_size: int = 16, seed: int = 0, max_tokens: int = 256,
                       log=None) -> TrainResult:
    """Train a Bradley–Terry reward model on `data` and write it to `out` (a new or empty folder)."""
    from safetensors.torch import save_file

    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out} already exists and is not an empty folder; choose a new folder")
    pairs = read_pairs(data)
    torch.manual_seed(seed)
    out.mkdir(parents=True, exist_ok=True)
    if base is None:
        backbone, tok = _tiny_backbone(out / BACKBONE, pairs, seed, max_tokens)
    else:
        from tracerl.models import load_model_and_tokenizer

        backbone, tok = load_model_and_tokenizer(base, key="--base")
    hidden = backbone.config.hidden_size
    head = torch.nn.Linear(hidden, 1)
    torch.nn.init.normal_(head.weight, std=1.0 / math.sqrt(hidden))
    torch.nn.init.zeros_(head.bias)
    rm = RewardModel(backbone, tok, head, max_tokens)
    rm.train()
    opt = torch.optim.AdamW(rm.parameters(), lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    texts = [(rm_text(tok, q, c), rm_text(tok, q, r)) for q, c, r in pairs]
    loss_v = float("nan")
    for epoch in range(epochs):
        order, total = torch.randperm(len(texts), generator=gen).tolist(), 0.0
        for i in range(0, len(order), batch_size):
            batch = [texts[j] for j in order[i:i + batch_size]]
            scores = rm([c for c, _ in batch] + [r for _, r in batch])
            loss = bt_loss(scores[:len(batch)], scores[len(batch):])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(batch)
        loss_v = total / len(texts)
        if log is not None:
            log(f"reward model epoch {epoch + 1}/{epochs}: Bradley-Terry loss {loss_v:.4f}")
    rm.eval()
    chosen = rm.score([(q, c) for q, c, _ in pairs])
    rejected = rm.score([(q, r) for q, _, r in pairs])
    acc = sum(c > r for c, r in zip(chosen, rejected)) / len(pairs)
    backbone.save_pretrained(out / BACKBONE, safe_serialization=True)
    tok.save_pretrained(out / BACKBONE)
    save_file({"weight": head.weight.detach().cpu().contiguous(), "bias": head.bias.detach().cpu().contiguous()},
              str(out / HEAD))
    meta = {"kind": KIND, "backbone": BACKBONE, "base": base or "tiny", "pooling": "last_token", "max_tokens": max_tokens,
            "data": str(Path(data).resolve()), "data_sha256": hashlib.sha256(Path(data).read_bytes()).hexdigest(),
            "pairs": len(pairs), "epochs": epochs, "lr": lr, "batch_size": batch_size, "seed": seed,
            "final_loss": loss_v, "pair_accuracy": acc}
    (out / META).write_text(json.dumps(meta, indent=2) + "\n")
    return TrainResult(out, len(pairs), epochs, loss_v, acc)


def load_reward_model(path: str | Path, *, device: str = "cpu") -> tuple[RewardModel, dict]:
    """The reward model in `path` (written by `train_reward_model`) and its metadata; a folder that is not
    one is one sentence."""
    from safetensors.torch import load_file

    from tracerl.models import load_model_and_tokenizer

    p = Path(path)
    if not (p / META).is_file() or not (p / HEAD).is_file():
        raise UserError(f"roles.reward_model.path {p} is not a reward model folder (no {META} and {HEAD}); train one "
                        "with `tracerl reward-model PREFS.jsonl --out DIR`")
    meta = json.loads((p / META).read_text())
    if meta.get("kind") != KIND:
        raise UserError(f"{p / META} names kind {meta.get('kind')!r}, not {KIND!r}")
    backbone, tok = load_model_and_tokenizer(p / BACKBONE, key="roles.reward_model.path")
    state = load_file(str(p / HEAD))
    head = torch.nn.Linear(state["weight"].shape[1], 1)
    head.load_state_dict(state)
    rm = RewardModel(backbone, tok, head, int(meta.get("max_tokens", 256))).to(device)
    rm.eval()
    for q in rm.parameters():
        q.requires_grad_(False)
    h = hashlib.sha256()
    for f in sorted(p.rglob("*")):
        if f.is_file():
            h.update(f.relative_to(p).as_posix().encode())
            h.update(f.read_bytes())
    meta["sha256"] = h.hexdigest()
    return rm, meta


__all__ = ["bt_loss", "read_pairs", "rm_text", "RewardModel", "train_reward_model", "load_reward_model", "TrainResult"]
