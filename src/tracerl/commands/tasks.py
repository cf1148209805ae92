"""`tracerl tasks check FILE` and `tracerl tasks stats FILE_OR_RECIPE`."""

from __future__ import annotations

import sys
from pathlib import Path

from tracerl.errors import UserError


def register(sub) -> None:
    p = sub.add_parser("tasks", help="validate task files, show pool statistics")
    tsub = p.add_subparsers(dest="tasks_command", metavar="TASKS_COMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    c = tsub.add_parser("check", help="validate a task file; print each bad row; exit 1 if any row is bad")
    c.add_argument("file", help="a .jsonl or .parquet task file, or a directory saved with Dataset.save_to_disk")
    c.add_argument("--license", default=None, help="license of rows that declare none")
    c.add_argument("--split", choices=("train", "heldout"), default="train", help="split of rows that declare none")
    c.set_defaults(func=run_check)

    s = tsub.add_parser("stats", help="pre- and post-filter distributions by source and difficulty bucket")
    s.add_argument("target", help="a task file, or a YAML file whose `tasks:` section is a task config")
    s.add_argument("--profile", default=None, help="difficulty profile JSON (pass-rate buckets, all-pass/all-fail filters)")
    s.add_argument("--license", default=None, help="license of rows that declare none (task files only)")
    s.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                   help="set a filter option, e.g. --filter exact_duplicates=true --filter min_prompt_words=4")
    s.set_defaults(func=run_stats)


def run_check(args) -> int:
    from tracerl.tasks.sources import load_task_file

    src = load_task_file(args.file, license=args.license, split=args.split)
    for err in src.errors:
        print(err)
    status = "bad" if src.errors else "ok"
    print(f"{args.file}: {len(src.tasks)} good rows, {len(src.errors)} bad rows ({status}); "
          f"content sha256 {src.content_sha256[:16]}", file=sys.stderr)
    return 1 if src.errors else 0


def _tasks_config(args):
    import yaml
    from pydantic import ValidationError

    from tracerl.tasks.config import FilterConfig, TasksConfig, TaskSourceConfig

    path = Path(args.target)
    if path.suffix.lower() in (".yaml", ".yml"):
        if not path.exists():
            raise UserError(f"recipe {args.target!r} does not exist; check the path")
        data = yaml.safe_load(path.read_text()) or {}
        section = data.get("tasks", data) if isinstance(data, dict) else None
        if not isinstance(section, dict):
            raise UserError(f"{args.target!r} has no `tasks:` section to read a task config from")
        try:
            cfg = TasksConfig.model_validate(section)
        except ValidationError as err:
            first = err.errors()[0]
            raise UserError(f"{args.target!r}: tasks.{'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    else:
        cfg = TasksConfig(sources=[TaskSourceConfig(path=args.target, license=args.license)])
    if args.filter:
        overrides = {}
        for item in args.filter:
            key, sep, value = item.partition("=")
            if not sep:
                raise UserError(f"--filter {item!r} is not KEY=VALUE; e.g. --filter exact_duplicates=true")
            overrides[key] = yaml.safe_load(value)
        try:
            cfg.filters = FilterConfig.model_validate({**cfg.filters.model_dump(), **overrides})
        except ValidationError as err:
            first = err.errors()[0]
            raise UserError(f"--filter {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    return cfg


def run_stats(args) -> int:
    from tracerl.tasks.pipeline import build_pool, distribution, format_distributions
    from tracerl.tasks.profile import DifficultyProfile

    cfg = _tasks_config(args)
    prof = DifficultyProfile.load(args.profile) if args.profile else None
    pool = build_pool(cfg, profile=prof)
    print(format_distributions(distribution(pool.loaded, pool.profile), distribution(pool.kept, pool.profile)))
    counts = pool.ledger.counts()
    print("discarded: " + (", ".join(f"{k} {v}" for k, v in counts.items()) if counts else "none"))
    if pool.row_errors:
        print(f"bad rows not loaded: {len(pool.row_errors)} (see `tracerl tasks check`)")
    return 0
