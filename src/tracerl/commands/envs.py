"""`tracerl envs [--json]`: the registered environments, their tools, reward components and
difficulty range."""

from __future__ import annotations

import json
import sys


def register(sub) -> None:
    p = sub.add_parser("envs", help="list the registered environments")
    p.add_argument("--json", action="store_true", help="print one JSON object per environment, as a list")
    p.set_defaults(func=run)


def describe(name: str) -> dict:
    from tracerl.envs import get_env

    spec = get_env(name)
    package = sys.modules.get(f"tracerl.envs.{name}")
    rng = getattr(package, "DIFFICULTY_RANGE", None)
    return {
        "name": spec.name,
        "revision": spec.revision,
        "tools": list(spec.tools),
        "reward_components": dict(spec.reward_weights),
        "difficulty_range": list(rng) if rng is not None else None,
        "stop_strings": list(spec.stop_strings),
        "description": spec.description,
    }


def run(args) -> int:
    from tracerl.envs import env_names

    rows = [describe(n) for n in env_names()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    header = ("name", "revision", "tools", "reward (weight × component)", "difficulty")
    table = [header] + [(
        r["name"], r["revision"], ",".join(r["tools"]) or "-",
        " + ".join(f"{w:g}×{k}" for k, w in r["reward_components"].items()),
        "-" if r["difficulty_range"] is None else "{:g}..{:g}".format(*r["difficulty_range"]),
    ) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0
