"""`tracerl export`: one record per trajectory with the DESIGN.md §3 field names."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import IO

from tracerl.contract.serialize import to_dict
from tracerl.store.rundir import RunDir


def export_jsonl(run: RunDir, out: IO[str], *, stage: str | None = None) -> int:
    n = 0
    for traj in run.store.trajectories(stage=stage):
        out.write(json.dumps(to_dict(traj)) + "\n")
        n += 1
    return n


def export_parquet(run: RunDir, path: Path, *, stage: str | None = None) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = []
    for traj in run.store.trajectories(stage=stage):
        d = to_dict(traj)
        # nested free-form fields are kept as JSON text so the schema is stable across runs
        for key in ("spans", "reward_components", "reward_weights", "verifier_output", "sampling", "retry_lineage"):
            d[key] = json.dumps(d[key])
        records.append(d)
    pq.write_table(pa.Table.from_pylist(records), path)
    return len(records)


def export(run_dir: str, fmt: str, out: str | None, stage: str | None = None) -> int:
    run = RunDir(run_dir)
    try:
        if fmt == "parquet":
            if not out:
                from tracerl.errors import UserError

                raise UserError("parquet is binary; give a file with --out FILE.parquet")
            return export_parquet(run, Path(out), stage=stage)
        if out:
            with open(out, "w") as f:
                return export_jsonl(run, f, stage=stage)
        return export_jsonl(run, sys.stdout, stage=stage)
    finally:
        run.close()
