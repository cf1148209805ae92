"""Metric series of a run, read generically from metrics.jsonl (or the store when it is absent)."""

from __future__ import annotations

import fnmatch
import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

Series = dict[tuple[str, str], list[tuple[int, float]]]  # (stage, metric) -> [(step, value)]


def load_series(run_path: Path) -> Series:
    """Every finite value of every metric, keyed by (stage, name), in logging order. A held-out metric
    logged with the tag `eval/protocol` is keyed `eval/<column>/<name>`, so two protocols never share a
    series."""
    rows: list[dict[str, Any]] = []
    jsonl = run_path / "metrics.jsonl"
    if jsonl.exists():
        for line in jsonl.read_text().splitlines():
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut by a crash must not hide the rest
    elif (run_path / "store.sqlite").exists():
        from tracerl.store.sqlite import Store

        with Store(run_path / "store.sqlite") as store:
            by_step: dict[tuple[str, int], dict[str, Any]] = {}
            for m in store.metrics():
                by_step.setdefault((m["stage"], m["step"]), {"stage": m["stage"], "step": m["step"]})[m["name"]] = m["value"]
            rows = list(by_step.values())
    series: Series = defaultdict(list)
    for row in rows:
        stage, step = str(row.get("stage", "")), row.get("step", 0)
        tags = row.get("tags") if isinstance(row.get("tags"), dict) else {}
        column = tags.get("eval/protocol")  # held-out numbers logged as eval/avg@n beside their protocol column
        for k, v in row.items():
            if k in ("stage", "step") or not isinstance(v, (int, float)) or isinstance(v, bool):
                continue
            if column and k.startswith("eval/") and k.count("/") == 1:
                k = f"eval/{column}/{k[5:]}"  # kept apart per protocol; the legend shows the protocol's label
            if math.isfinite(v):
                series[(stage, k)].append((int(step), float(v)))
    return dict(series)


def select(series: Series, patterns: list[str], exclude: list[str] = ()) -> Series:
    """Series whose name matches any glob pattern (and none of `exclude`), in pattern order."""
    out: Series = {}
    for pat in patterns:
        for key in sorted(series):
            name = key[1]
            if key not in out and fnmatch.fnmatchcase(name, pat) and not any(fnmatch.fnmatchcase(name, e) for e in exclude):
                out[key] = series[key]
    return out


def last_values(series: Series) -> list[tuple[str, str, int, float]]:
    return sorted((stage, name, pts[-1][0], pts[-1][1]) for (stage, name), pts in series.items() if pts)
