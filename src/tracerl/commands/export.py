"""`tracerl export RUN_DIR --format jsonl|parquet|messages [--out FILE] [--stage STAGE] [--step N] [--correct]`."""

from __future__ import annotations

import sys


def register(sub) -> None:
    p = sub.add_parser("export", help="write a run's trajectories as JSONL (stdout), Parquet, or an SFT file",
                       description="One record per trajectory: the contract's fields plus stage, step (the RL "
                       "update 1..N that trained on it, as on the console), decoded prompt_text / completion_text, "
                       "and the advantage and loss weight the learner gave it. Load a Parquet file with "
                       "datasets.load_dataset('parquet', data_files=FILE). --format messages writes one OpenAI "
                       "`messages` conversation per episode, a file sft.data trains on (--correct: successes only).")
    p.add_argument("run_dir")
    p.add_argument("--format", choices=("jsonl", "parquet", "messages"), default="jsonl",
                   help="messages: {\"messages\": [...]} lines for sft.data (tool calls in the env's grammar)")
    p.add_argument("--out", default=None, help="file to write (default: standard output for jsonl)")
    p.add_argument("--stage", default=None,
                   help="only this stage; a prefix at '/' matches, so 'eval' selects every eval/<protocol> "
                   "(stages: rl, rl_filtered, profile, eval)")
    p.add_argument("--step", type=int, default=None,
                   help="only trajectories stored at this step (RL: the update 1..N; eval: updates before it)")
    p.add_argument("--correct", action="store_true",
                   help="with --format messages: only episodes that succeeded (a run's good episodes)")
    p.set_defaults(func=run)


def run(args) -> int:
    from tracerl.store.export import export

    n = export(args.run_dir, args.format, args.out, stage=args.stage, step=args.step, correct=args.correct)
    if args.out:
        what = "conversations" if args.format == "messages" else "trajectories"
        print(f"wrote {n} {what} to {args.out}" + (" (an sft.data file)" if args.format == "messages" else ""),
              file=sys.stderr)
    return 0
