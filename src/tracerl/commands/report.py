"""`tracerl report RUN_DIR`: plots and report/index.html, readable offline in a browser."""

from __future__ import annotations

from pathlib import Path

from tracerl.errors import UserError


def register(sub) -> None:
    p = sub.add_parser("report", help="write RUN_DIR/report/index.html and PNG plots from a run's metrics")
    p.add_argument("run_dir")
    p.set_defaults(func=run)


def run(args) -> int:
    path = Path(args.run_dir)
    if not path.is_dir():
        raise UserError(f"{path} is not a directory; pass the run folder a `tracerl train` run wrote")
    if not any((path / f).exists() for f in ("metrics.jsonl", "store.sqlite", "manifest.json")):
        raise UserError(f"{path} has no metrics.jsonl, store.sqlite or manifest.json; pass a tracerl run directory")
    from tracerl.eval.report import build_report

    index = build_report(path)
    print(f"wrote {index}")
    return 0
