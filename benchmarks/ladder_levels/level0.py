"""Level 0: equation and mask tests without a model — the algorithm and contract test files (GRPO
fixtures, denominators, clipping, leave-one-out, importance ratios, masks, truncation, finite
differences, trajectory round trips), run by pytest in a subprocess; the gate counts their outcomes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from . import gates as G

REPO = Path(__file__).parents[2]
FILES = ["tests/algorithms", "tests/contract"]


def run(args, gates: dict, root: Path, results: dict) -> tuple[str, list[G.Check]]:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", *FILES],
                          cwd=REPO, capture_output=True, text=True)
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-500:]
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|error|errors|skipped)", tail)}
    results.update({"files": FILES, "summary": tail, "returncode": proc.returncode,
                    "passed": counts.get("passed", 0), "failed": counts.get("failed", 0),
                    "errors": counts.get("error", 0) + counts.get("errors", 0)})
    return table(results), checks(results, gates)


def table(results: dict) -> str:
    return f"pytest {' '.join(results['files'])}: {results['summary']}"


def checks(results: dict, gates: dict) -> list[G.Check]:
    lv = "level0"
    return [G.at_least("tests passed", results["passed"], G.threshold(gates, lv, "passed_min")),
                  G.at_most("tests failed or errored", results["failed"] + results["errors"],
                            G.threshold(gates, lv, "failed_max"))]
