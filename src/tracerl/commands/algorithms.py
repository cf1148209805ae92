"""`tracerl algorithms`: list every registered algorithm with its one-line description and source."""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "algorithms",
        help="list the registered advantage estimators, losses, corrections, controllers and selection rules",
        description="List every algorithm a recipe can select by name, with a one-line description and its source.",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list of {name, kind, description, source}")
    parser.add_argument("--kind", default=None, help="show only one kind (advantage, loss, kl, correction, ...)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tracerl.algorithms import registry
    from tracerl.errors import UserError

    entries = registry.entries()
    if args.kind is not None:
        if args.kind not in registry.KINDS:
            raise UserError(f"unknown algorithm kind {args.kind!r}; choose one of {', '.join(registry.KINDS)}")
        entries = [e for e in entries if e.kind == args.kind]
    if args.json:
        print(json.dumps([e.as_dict() for e in entries], indent=2))
        return 0
    width = max((len(e.name) for e in entries), default=0)
    kind_width = max((len(e.kind) for e in entries), default=0)
    for e in entries:
        print(f"{e.name:<{width}}  {e.kind:<{kind_width}}  {e.description}")
        print(f"{'':<{width}}  {'':<{kind_width}}  source: {e.source}")
    return 0
