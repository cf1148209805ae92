"""`tracerl export RUN_DIR --format jsonl|parquet [--out FILE] [--stage STAGE]`."""

from __future__ import annotations

import sys


def register(sub) -> None:
    p = sub.add_parser("export", help="write a run's trajectories as JSONL (stdout) or Parquet")
    p.add_argument("run_dir")
    p.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    p.add_argument("--out", default=None, help="file to write (default: standard output for jsonl)")
    p.add_argument("--stage", default=None, help="only trajectories of this stage (e.g. rl, eval)")
    p.set_defaults(func=run)


def run(args) -> int:
    from tracerl.store.export import export

    n = export(args.run_dir, args.format, args.out, stage=args.stage)
    if args.out:
        print(f"wrote {n} trajectories to {args.out}", file=sys.stderr)
    return 0
