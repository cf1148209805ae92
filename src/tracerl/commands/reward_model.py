"""`tracerl reward-model PREFS.jsonl --out DIR`: train a Bradley–Terry reward model from preference pairs.

Each line of PREFS is `{"prompt": ..., "chosen": ..., "rejected": ...}`. The backbone is the built-in
tiny model (its tokenizer trained on the pairs) or `--base`, a local Hugging Face causal LM; a scalar
head on its last token is trained with the Bradley–Terry loss (train/reward_model.py). Use the folder
in a recipe as `roles: {reward_model: {path: DIR}}`; it is calibrated on the environment's audit set
before the run (train/reward_model_role.py).
"""

from __future__ import annotations

import sys


def register(sub) -> None:
    p = sub.add_parser("reward-model", help="train a Bradley-Terry reward model from {prompt, chosen, rejected} pairs",
                       description="Train a reward model (a backbone and a scalar head, Bradley-Terry loss) on a "
                       "JSONL of preference pairs and write it to --out, for roles.reward_model.path.")
    p.add_argument("data", help="JSONL, one {\"prompt\": ..., \"chosen\": ..., \"rejected\": ...} per line")
    p.add_argument("--out", required=True, help="folder to write (must not exist or be empty)")
    p.add_argument("--base", default=None, help="a local Hugging Face causal LM as the backbone (default: the tiny model)")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=256, help="each (prompt, response) keeps its last N tokens")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def run(args) -> int:
    from tracerl.errors import UserError
    from tracerl.train.reward_model import train_reward_model

    if args.epochs < 1 or args.batch_size < 1 or args.max_tokens < 8 or not args.lr > 0:
        raise UserError("--epochs and --batch-size must be at least 1, --max-tokens at least 8 and --lr positive")
    res = train_reward_model(args.data, args.out, base=args.base, epochs=args.epochs, lr=args.lr,
                             batch_size=args.batch_size, seed=args.seed, max_tokens=args.max_tokens,
                             log=lambda m: print(m, file=sys.stderr))
    print(f"wrote the reward model to {res.path}: {res.pairs} pairs, {res.epochs} epochs, Bradley-Terry loss "
          f"{res.final_loss:.4f}, chosen above rejected on {res.pair_accuracy:.1%} of the pairs")
    return 0
