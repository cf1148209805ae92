"""`tracerl report RUN_DIR [RUN_DIR ...] [--out DIR] [--smooth W]`: one self-contained index.html with
interactive plots, readable offline in a browser; with several runs, one page overlaying them."""

from __future__ import annotations

from pathlib import Path

from tracerl.errors import UserError


def register(sub) -> None:
    p = sub.add_parser("report", help="write RUN_DIR/report/index.html (one offline file, interactive plots); several runs: one overlay page")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--out", default=None,
                   help="folder of the page (default RUN_DIR/report, or FIRST_RUN/report/compare for several runs)")
    p.add_argument("--smooth", type=float, default=0.0,
                   help="EMA weight in [0, 1) for training curves (raw values stay drawn faintly); 0 = off")
    p.set_defaults(func=run)


def _check(path: Path) -> None:
    if not path.is_dir():
        raise UserError(f"{path} is not a directory; pass the run folder a `tracerl train` run wrote")
    if not any((path / f).exists() for f in ("metrics.jsonl", "store.sqlite", "manifest.json")):
        raise UserError(f"{path} has no metrics.jsonl, store.sqlite or manifest.json; pass a tracerl run directory")


def run(args) -> int:
    if not 0.0 <= args.smooth < 1.0:
        raise UserError(f"--smooth {args.smooth} is out of range; give a weight in [0, 1), e.g. --smooth 0.6")
    paths = [Path(p) for p in args.run_dirs]
    for path in paths:
        _check(path)
    from tracerl.eval.report.html import build_comparison, build_report

    if len(paths) == 1:
        if args.out is not None:
            raise UserError("--out applies to a comparison of several runs; a single run's report is RUN_DIR/report")
        index = build_report(paths[0], smooth=args.smooth)
    else:
        index = build_comparison(paths, args.out, smooth=args.smooth)
    print(f"wrote {index}")
    return 0

