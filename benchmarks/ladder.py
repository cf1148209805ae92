"""The reference document's reproduction ladder (§10), one level at a time, each ending PASS / FAIL
against the thresholds predeclared in benchmarks/ladder_gates.yaml.

    .venv/bin/python benchmarks/ladder.py --level 0
    .venv/bin/python benchmarks/ladder.py --level 2 --seeds 0 1 2          # 16-cell factorial x 3 seeds
    .venv/bin/python benchmarks/ladder.py --level 2 --quick --seeds 0 --cells 2   # plumbing check, not a result
    .venv/bin/python benchmarks/ladder.py --level 5 | 6
    .venv/bin/python benchmarks/ladder.py --level 2 --table           # re-judge the recorded results

Results go to benchmarks/ladder_results/level<N>.json (with the gate file's sha256, the command, the
wall time and the machine's load); runs to runs/ladder/level<N>/. A level resumes from its JSON (rows
already recorded are not rerun) unless --fresh. docs/ladder.md records every level's result.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from ladder_levels import common, gates as G  # noqa: E402

LEVELS = {0: "level0", 1: "level1", 2: "level2", 3: "level3", 4: "level4", 5: "level5", 6: "level6"}
REPO = Path(__file__).parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--level", type=int, required=True, choices=sorted(LEVELS))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--quick", action="store_true", help="smallest sizes: checks the plumbing, never a recorded result")
    ap.add_argument("--cells", type=int, default=0, help="level 2: run only the first N design cells (plumbing checks)")
    ap.add_argument("--gates", default=str(G.GATES_FILE), help="the predeclared gate file")
    ap.add_argument("--out", default=None, help="results JSON (default benchmarks/ladder_results/level<N>[-quick].json)")
    ap.add_argument("--root", default=None, help="run directories (default runs/ladder/level<N>)")
    ap.add_argument("--fresh", action="store_true", help="ignore recorded rows and rerun everything")
    ap.add_argument("--table", action="store_true", help="print the table and gate of the recorded results; run nothing")
    args = ap.parse_args(argv)
    try:
        gates, digest = G.load(Path(args.gates))
    except G.GateFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    tag = f"level{args.level}" + ("-quick" if args.quick else "")
    out = Path(args.out or REPO / "benchmarks" / "ladder_results" / f"{tag}.json")
    root = Path(args.root or REPO / "runs" / "ladder" / tag)
    import json

    results = json.loads(out.read_text()) if out.exists() and not args.fresh else {}
    section = G.section_digest(gates, f"level{args.level}")
    # a result is bound to its level's thresholds (older results: to the whole file they were recorded under)
    legacy = None if results.get("level_gates_sha256") else results.get("gates_sha256")
    same = results.get("level_gates_sha256", section) == section and legacy in (None, digest)
    if not same and not args.table:
        print(f"error: {out} was recorded under other level{args.level} thresholds than {args.gates} declares now; "
              "rerun with --fresh or restore those thresholds", file=sys.stderr)
        return 2
    results.update({"level": args.level, "gates_file": str(Path(args.gates).resolve().relative_to(REPO))
                    if Path(args.gates).resolve().is_relative_to(REPO) else args.gates,
                    "gates_sha256": digest, "quick": args.quick})
    if same:
        results["level_gates_sha256"] = section
    if not args.table:
        results["command"] = "python benchmarks/ladder.py " + " ".join(argv if argv is not None else sys.argv[1:])
        results["load_before"] = os.getloadavg()
    args.save = lambda: common.write_json(out, results)
    mod = importlib.import_module(f"ladder_levels.{LEVELS[args.level]}")
    t0 = time.time()
    try:
        if args.table:
            text, checks = mod.table(results), mod.checks(results, gates)
        else:
            root.mkdir(parents=True, exist_ok=True)
            text, checks = mod.run(args, gates, root, results)
    except G.GateFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not args.table:
        results["wall_s"] = results.get("wall_s_before", 0.0) + time.time() - t0
        results["wall_s_before"] = results["wall_s"]
        results["load_after"] = os.getloadavg()
    results["gate"] = {"verdict": G.verdict(checks), "checks": [c.__dict__ | {"passed": c.passed} for c in checks]}
    args.save()
    print(text)
    print(G.report(args.level, checks))
    if args.quick:
        print("(--quick: plumbing sizes; not a result of the ladder)")
    return 0 if G.verdict(checks) == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
