"""`tracerl export RUN_DIR --format jsonl|parquet [--out FILE] [--stage STAGE] [--step N]`."""

from __future__ import annotations

import sys


def register(sub) -> None:
    p = sub.add_parser("export", help="write a run's trajectories as JSONL (stdout) or Parquet",
                       description="One record per trajectory: the contract's fields plus stage, step, decoded "
                       "prompt_text / completion_text, and the advantage and loss weight the learner gave it. "
                       "Load a Parquet file with datasets.load_dataset('parquet', data_files=FILE).")
    p.add_argument("run_dir")
    p.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    p.add_argument("--out", default=None, help="file to write (default: standard output for jsonl)")
    p.add_argument("--stage", default=None,
                   help="only this stage; a prefix at '/' matches, so 'eval' selects every eval/<protocol> "
                   "(stages: rl, rl_filtered, profile, eval)")
    p.add_argument("--step", type=int, default=None, help="only trajectories stored at this step")
    p.set_defaults(func=run)


def run(args) -> int:
    from tracerl.store.export import export

    n = export(args.run_dir, args.format, args.out, stage=args.stage, step=args.step)
    if args.out:
        print(f"wrote {n} trajectories to {args.out}", file=sys.stderr)
    return 0
