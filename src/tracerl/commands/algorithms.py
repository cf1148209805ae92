"""`tracerl algorithms`: the algorithms a recipe selects (`rl.algorithm.name`) with their parameters,
then every registered function they are built from, with its one-line description and source."""

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
    parser.add_argument("--name", default=None, help="show one algorithm's parameters with their defaults and docs")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tracerl.algorithms import registry
    from tracerl.errors import UserError

    if args.name is not None:
        return _show_algorithm(args.name, args.json)
    entries = registry.entries()
    if args.kind is not None:
        if args.kind not in registry.KINDS:
            raise UserError(f"unknown algorithm kind {args.kind!r}; choose one of {', '.join(registry.KINDS)}")
        entries = [e for e in entries if e.kind == args.kind]
    if args.json:
        print(json.dumps([e.as_dict() for e in entries], indent=2))
        return 0
    if args.kind is None:
        from tracerl.algorithms.spec import ALGORITHMS

        print("algorithms (rl.algorithm.name; `tracerl algorithms --name NAME` shows the parameters):")
        for name, cls in ALGORITHMS.items():
            print(f"  {name:<22} {(cls.__doc__ or '').strip().splitlines()[0]}")
        print("\nbuilding blocks:")
    width = max((len(e.name) for e in entries), default=0)
    kind_width = max((len(e.kind) for e in entries), default=0)
    for e in entries:
        print(f"{e.name:<{width}}  {e.kind:<{kind_width}}  {e.description}")
        print(f"{'':<{width}}  {'':<{kind_width}}  source: {e.source}")
    return 0


def _show_algorithm(name: str, as_json: bool) -> int:
    import difflib

    from tracerl.algorithms.spec import ALGORITHMS
    from tracerl.errors import UserError

    if name not in ALGORITHMS:
        close = difflib.get_close_matches(name, list(ALGORITHMS), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(ALGORITHMS)}"
        raise UserError(f"no algorithm named {name!r}; {hint}")
    cls = ALGORITHMS[name]
    rows = [{"parameter": f"rl.algorithm.{k}", "default": repr(f.get_default(call_default_factory=True)),
             "doc": (f.description or "").replace("\n", " ")} for k, f in cls.model_fields.items() if k != "name"]
    if as_json:
        print(json.dumps({"name": name, "doc": (cls.__doc__ or "").strip(), "parameters": rows}, indent=2))
        return 0
    print(f"{name}: {' '.join((cls.__doc__ or '').split())}\n")
    for r in rows:
        print(f"  {r['parameter']} = {r['default']}\n      {r['doc']}")
    return 0
