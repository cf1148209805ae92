"""Compare a `run.backend: ray` run with the same recipe run locally (docs/ray.md).

    python benchmarks/ray_vs_local.py RUN_LOCAL RUN_RAY

prints held-out success before/after RL and wall time side by side, then checks that the two runs
have the same shape (files, manifest keys, store tables) and whether their trajectories (tokens, roles,
behavior log-probs, versions, rewards, spans) and metrics (timings left out) are identical. Exit 0 when
they are, 1 when they differ (the first difference is printed).
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

TRAJ = ("stage, step, group_id, task_id, split, env_name, reward, terminal_reason, truncated, num_tokens, "
        "num_action_tokens, token_ids, roles, behavior_logprobs, policy_versions")
SPAN = "kind, start, \"end\", tool_name, tool_request, tool_status, tool_response_sha256, state_hash, sampled_ids_sha256"
TIMING = ("time/", "tokens_per_s", "latency", "wall", "idle_s", "busy_s", "queue_age_s")


def trajectories(run: Path) -> list[tuple]:
    with sqlite3.connect(run / "store.sqlite") as db:
        rows = db.execute(f"SELECT trajectory_id, {TRAJ} FROM trajectories ORDER BY rowid").fetchall()
        spans = {}
        for tid, *rest in db.execute(f"SELECT trajectory_id, {SPAN} FROM spans ORDER BY trajectory_id, span_id"):
            spans.setdefault(tid, []).append(tuple(rest))
    return [(*r[1:], tuple(spans.get(r[0], []))) for r in rows]


def metrics(run: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [{k: v for k, v in r.items() if not any(t in k for t in TIMING)} for r in rows]


def shape(run: Path) -> dict:
    files = sorted(str(p.relative_to(run)).replace(run.name, "RUN") for p in run.rglob("*") if p.is_file())
    manifest = json.loads((run / "manifest.json").read_text())
    with sqlite3.connect(run / "store.sqlite") as db:
        tables = sorted(r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
    return {"files": files, "manifest": sorted(manifest), "tables": tables}


def evals(run: Path) -> tuple[dict, float | None]:
    s = json.loads((run / "summary.json").read_text())
    return {e["after"]: e["eval/success"] for e in s["evals"]}, s.get("wall_s")


def compare(a: Path, b: Path) -> list[str]:
    """The differences between two runs (empty when they match)."""
    out = []
    sa, sb = shape(a), shape(b)
    for k in sa:
        if sa[k] != sb[k]:
            out.append(f"{k} differ: only in {a.name}: {sorted(set(sa[k]) - set(sb[k]))}, "
                       f"only in {b.name}: {sorted(set(sb[k]) - set(sa[k]))}")
    ta, tb = trajectories(a), trajectories(b)
    if len(ta) != len(tb):
        out.append(f"{len(ta)} trajectories against {len(tb)}")
    for i, (x, y) in enumerate(zip(ta, tb)):
        if x != y:
            out.append(f"trajectory {i} (stage {x[0]}, step {x[1]}, group {x[2]}) differs")
            break
    ma, mb = metrics(a), metrics(b)
    for i, (x, y) in enumerate(zip(ma, mb)):
        if x != y:
            keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
            out.append(f"metrics row {i} differs in {keys[:8]}")
            break
    if len(ma) != len(mb):
        out.append(f"{len(ma)} metrics rows against {len(mb)}")
    return out


def main(argv: list[str]) -> int:
    a, b = Path(argv[0]), Path(argv[1])
    (ea, wa), (eb, wb) = evals(a), evals(b)
    print(f"{'':<10} {a.name:>24} {b.name:>24}")
    for k in ea:
        print(f"{'held-out ' + k:<10} {ea[k]:>24.3f} {eb.get(k, float('nan')):>24.3f}")
    if wa and wb:
        print(f"{'wall s':<10} {wa:>24.0f} {wb:>24.0f}   ({b.name} / {a.name} = {wb / wa:.2f})")
    ma = json.loads((a / "manifest.json").read_text()).get("backend")
    mb = json.loads((b / "manifest.json").read_text()).get("backend")
    print(f"backend: {ma} | {mb}")
    diffs = compare(a, b)
    n = len(trajectories(a))
    print("identical: same shape, all %d trajectories and every metric (timings aside)" % n if not diffs
          else "differences:\n  " + "\n  ".join(diffs))
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
