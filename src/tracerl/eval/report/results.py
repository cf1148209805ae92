"""What the report opens with: the before/after table of held-out results (the rows the console prints at
the end of `tracerl train`, from summary.json) and the verdict of every gate (`telemetry/gates.py`): each
gate the recipe configured, whether it held or tripped, and the worst value its metric reached.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tracerl.eval.protocol import read_results
from tracerl.eval.report.series import Series

_PASS = re.compile(r"^eval/pass@(\d+)$")
_ENV_SUCCESS = re.compile(r"^eval/([^/]+)/success$")


def summary_evals(run_path: Path) -> list[dict[str, Any]]:
    """The evaluations of summary.json the console's before/after table shows (not the in-RL ones)."""
    summary = run_path / "summary.json"
    try:
        evals = json.loads(summary.read_text()).get("evals", []) if summary.exists() else []
    except json.JSONDecodeError:
        return []
    return [e for e in evals if not str(e.get("after", "")).startswith("rl step")]


def _protocol(column: str | dict[str, str], labels: dict[str, str]) -> str:
    """A readable protocol: one column, or (a run over several environments) one column per environment."""
    if isinstance(column, dict):
        return "; ".join(labels.get(c, c) for _, c in sorted(column.items()))
    return labels.get(column, column)


def before_after(runs: list[tuple[str, Path]], labels: dict[str, str]) -> tuple[list[str], list[list[Any]]]:
    """Header and rows: per run and evaluation, held-out success, pass@k, per-environment success (runs over
    several environments), tool calls, truncation and infra failures, and the protocol. A run without
    summary.json contributes its stored evaluations (`tracerl eval`) instead."""
    found = [(name, e) for name, path in runs for e in summary_evals(path)]
    ks = sorted({int(m.group(1)) for _, e in found for k in e if (m := _PASS.match(k))})
    envs = sorted({m.group(1) for _, e in found for k in e if (m := _ENV_SUCCESS.match(k))})
    header = (["run"] if len(runs) > 1 else []) + ["after", "step", "held-out success"] + [f"pass@{k}" for k in ks] \
        + [f"{env} success" for env in envs] + ["tool calls", "truncation", "infra fail", "protocol"]
    rows = []
    for name, e in found:
        rows.append(([name] if len(runs) > 1 else []) + [e.get("after", ""), e.get("step", ""), e.get("eval/success")]
                    + [e.get(f"eval/pass@{k}") for k in ks] + [e.get(f"eval/{env}/success") for env in envs]
                    + [e.get("eval/tool_calls_per_episode"), e.get("eval/truncation_rate"),
                       e.get("eval/infra_failure_rate"), _protocol(e.get("protocol", ""), labels)])
    if rows:
        return header, rows
    header = (["run"] if len(runs) > 1 else []) + ["after", "checkpoint", "held-out success", "metrics", "protocol"]
    for name, path in runs:  # no summary.json: the stored evaluations of `tracerl eval`
        for rec in read_results(path):
            p, r = rec["protocol"], rec["results"]
            success = next((v for k, v in sorted(r.items()) if k.startswith("avg@")), r.get("pass@1"))
            rest = ", ".join(f"{k} {v:.3f}" for k, v in sorted(r.items()) if k.startswith("pass@") and isinstance(v, float))
            rows.append(([name] if len(runs) > 1 else []) + ["stored evaluation", p.get("checkpoint_sha256", "")[:12],
                                                             success, rest, labels.get(p.get("column", ""), "")])
    return header, rows


def _config(run_path: Path) -> dict[str, Any]:
    path = run_path / "config.yaml"
    if not path.exists():
        return {}
    import yaml

    try:
        return yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError:
        return {}


def _rules(run_path: Path) -> list:
    gates = _config(run_path).get("gates")
    if not isinstance(gates, dict):
        return []
    from pydantic import ValidationError

    from tracerl.config.gates import GatesConfig
    from tracerl.telemetry.gates import GateMonitor

    try:
        return GateMonitor(GatesConfig.model_validate(gates)).rules
    except ValidationError:
        return []


def gate_verdicts(runs: list[tuple[str, Path, Series, list[dict[str, Any]]]]) -> tuple[list[str], list[list[Any]]]:
    """Header and rows, one per gate: configured (recipe `gates:`) or tripped (store event of kind "gate")
    for each run (name, path, series, events). The worst value is over RL steps; a gate held when no
    trip was recorded."""
    header = (["run"] if len(runs) > 1 else []) + ["gate", "metric", "limit", "patience", "worst value", "at step",
                                                    "verdict"]
    rows = []
    for name, path, series, events in runs:
        trips = {e.get("payload", {}).get("gate", e["message"]): e for e in events if e["kind"] == "gate"}
        for rule in _rules(path):
            metric = next((m for m in rule.metric if any(n == m for _, n in series)), rule.metric[0])
            pts = [p for (stage, n), ps in series.items() if n == metric and stage.startswith("rl") for p in ps]
            worst = (min if rule.bound == "min" else max)(pts, key=lambda p: p[1], default=None)
            trip = trips.pop(rule.gate, None)
            verdict = f"tripped at step {trip['step']}" if trip else "held"
            rows.append(([name] if len(runs) > 1 else []) + [
                rule.gate, metric, ("≥ " if rule.bound == "min" else "≤ ") + f"{rule.limit:g}", rule.patience,
                worst[1] if worst else "not recorded", worst[0] if worst else "", verdict])
        for gate, trip in trips.items():  # tripped without a rule in config.yaml (e.g. per-domain regression)
            payload = trip.get("payload", {})
            rows.append(([name] if len(runs) > 1 else []) + [
                gate, trip["message"], payload.get("limit", ""), "", payload.get("value", ""), trip["step"],
                f"tripped at step {trip['step']}"])
    return header, rows
