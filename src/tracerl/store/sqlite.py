"""The run's SQLite store (WAL): trajectories, spans, metrics and events.

Per-token arrays are packed little-endian bytes, so token ids, roles and log-probabilities come
back bit-for-bit. Every trajectory is validated against the contract before it is written.

Step numbers are the ones the console, metrics.jsonl and checkpoints use: RL episodes are stored under
the update that trained on them, 1..N (`rl step 3/N` on the console, `step_3/` the checkpoint after
it); an evaluation under the number of updates before it (0: before RL); profiling under 0.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from tracerl.contract import Trajectory, validate
from tracerl.contract.trajectory import Span
from tracerl.contract.serialize import from_dict, pack_arrays, unpack_arrays

SCHEMA = """
CREATE TABLE IF NOT EXISTS trajectories (
    trajectory_id TEXT PRIMARY KEY,
    stage TEXT NOT NULL,
    step INTEGER NOT NULL,
    group_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    split TEXT NOT NULL,
    env_name TEXT NOT NULL,
    reward REAL NOT NULL,
    terminal_reason TEXT NOT NULL,
    truncated INTEGER NOT NULL,
    num_tokens INTEGER NOT NULL,
    num_action_tokens INTEGER NOT NULL,
    meta TEXT NOT NULL,
    token_ids BLOB NOT NULL,
    roles BLOB NOT NULL,
    behavior_logprobs BLOB NOT NULL,
    policy_versions BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS traj_stage_step ON trajectories(stage, step);
CREATE TABLE IF NOT EXISTS spans (
    trajectory_id TEXT NOT NULL,
    span_id INTEGER NOT NULL,
    parent_span_id INTEGER,
    kind TEXT NOT NULL,
    start INTEGER NOT NULL,
    "end" INTEGER NOT NULL,
    tool_name TEXT, tool_request TEXT, tool_status TEXT, tool_latency_s REAL,
    tool_response_sha256 TEXT, state_hash TEXT, sampled_ids_sha256 TEXT,
    PRIMARY KEY (trajectory_id, span_id)
);
CREATE TABLE IF NOT EXISTS metrics (
    stage TEXT NOT NULL, step INTEGER NOT NULL, name TEXT NOT NULL, value REAL, time REAL NOT NULL, tags TEXT
);
CREATE INDEX IF NOT EXISTS metrics_name ON metrics(name, step);
CREATE TABLE IF NOT EXISTS events (
    time REAL NOT NULL, stage TEXT, step INTEGER, kind TEXT NOT NULL, message TEXT, payload TEXT
);
"""

TABLES = ("trajectories", "spans", "metrics", "events")
_META_FIELDS = tuple(f.name for f in dataclasses.fields(Trajectory)
                     if f.name not in ("token_ids", "roles", "behavior_logprobs", "policy_versions", "spans"))
_SPAN_FIELDS = tuple(f.name for f in dataclasses.fields(Span))


def _meta_json(t: Trajectory) -> str:
    """The trajectory's metadata as JSON, read field by field (no `dataclasses.asdict`, which deep-
    copies every per-token list only for them to be dropped); equal to contract.metadata_dict."""
    d = {name: getattr(t, name) for name in _META_FIELDS}
    d["terminal_reason"] = t.terminal_reason.value if t.terminal_reason else None
    d["spans"] = [{name: getattr(sp, name) for name in _SPAN_FIELDS} for sp in t.spans]
    return json.dumps(d)


_SPAN_COLS = ("span_id", "parent_span_id", "kind", "start", "end", "tool_name", "tool_request",
              "tool_status", "tool_latency_s", "tool_response_sha256", "state_hash", "sampled_ids_sha256")


class Store:
    """One SQLite file per run. Thread-safe for the writers of one process."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        if "tags" not in {r[1] for r in self._db.execute("PRAGMA table_info(metrics)")}:  # a store from before tags
            self._db.execute("ALTER TABLE metrics ADD COLUMN tags TEXT")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing --------------------------------------------------------------------------
    def add_trajectories(self, trajs: Iterable[Trajectory], *, stage: str, step: int) -> int:
        rows, span_rows = [], []
        for t in trajs:
            validate(t)
            blobs = pack_arrays(t)
            rows.append((t.trajectory_id, stage, step, t.group_id, t.task_id, t.split, t.env_name,
                         t.reward, t.terminal_reason.value, int(t.truncated), len(t),
                         t.num_action_tokens, _meta_json(t), blobs["token_ids"],
                         blobs["roles"], blobs["behavior_logprobs"], blobs["policy_versions"]))
            for s in t.spans:
                span_rows.append((t.trajectory_id, *(getattr(s, c) for c in _SPAN_COLS)))
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany(f"INSERT INTO trajectories VALUES ({','.join('?' * 17)})", rows)
            self._db.executemany(f"INSERT INTO spans VALUES ({','.join('?' * 13)})", span_rows)
            self._db.execute("COMMIT")
        return len(rows)

    def marks(self) -> dict[str, int]:
        """The last row of every table now: what a checkpoint records, so that a resume can roll
        the store back to this moment (`rollback`) and a redone step replaces, never duplicates."""
        with self._lock:
            return {t: int(self._db.execute(f"SELECT COALESCE(MAX(rowid), 0) FROM {t}").fetchone()[0]) for t in TABLES}

    def rollback(self, marks: dict[str, int]) -> dict[str, int]:
        """Delete every row written after `marks`, in one transaction; returns the rows removed per table."""
        removed = {}
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for table in TABLES:
                    cur = self._db.execute(f"DELETE FROM {table} WHERE rowid > ?", (int(marks.get(table, 0)),))
                    removed[table] = cur.rowcount
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return removed

    def integrity(self) -> str:
        """SQLite's own `PRAGMA integrity_check` ("ok" when the file is sound)."""
        with self._lock:
            return str(self._db.execute("PRAGMA integrity_check").fetchone()[0])

    def add_metrics(self, metrics: dict[str, float], *, stage: str, step: int,
                    tags: dict[str, str] | None = None) -> None:
        """One row per metric; `tags` (JSON, e.g. the evaluation protocol) is stored beside each value."""
        now, tagged = time.time(), json.dumps(tags) if tags else None
        rows = [(stage, step, k, None if v is None else float(v), now, tagged) for k, v in metrics.items()]
        with self._lock:
            self._db.executemany("INSERT INTO metrics (stage, step, name, value, time, tags) VALUES (?,?,?,?,?,?)", rows)

    def add_event(self, kind: str, message: str = "", *, stage: str | None = None,
                  step: int | None = None, payload: dict[str, Any] | None = None) -> None:
        with self._lock:
            self._db.execute("INSERT INTO events VALUES (?,?,?,?,?,?)",
                             (time.time(), stage, step, kind, message, json.dumps(payload or {})))

    # -- reading --------------------------------------------------------------------------
    def trajectories(self, *, stage: str | None = None, step: int | None = None,
                     trajectory_id: str | None = None) -> Iterator[Trajectory]:
        where, args = [], []
        for col, val in (("stage", stage), ("step", step), ("trajectory_id", trajectory_id)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        sql = "SELECT meta, token_ids, roles, behavior_logprobs, policy_versions FROM trajectories"
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY rowid", args).fetchall()
        for meta, *blobs in rows:
            d = json.loads(meta)
            d.update(unpack_arrays(dict(zip(("token_ids", "roles", "behavior_logprobs", "policy_versions"), blobs))))
            yield from_dict(d)

    def metrics(self, name: str | None = None, stage: str | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT stage, step, name, value, time, tags FROM metrics", []
        conds = []
        if name is not None:
            conds.append("name = ?")
            args.append(name)
        if stage is not None:
            conds.append("stage = ?")
            args.append(stage)
        if conds:
            sql += " WHERE " + " AND ".join(conds)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY rowid", args).fetchall()
        return [dict(zip(("stage", "step", "name", "value", "time"), r)) | ({"tags": json.loads(r[5])} if r[5] else {})
                for r in rows]

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT time, stage, step, kind, message, payload FROM events", []
        if kind is not None:
            sql, args = sql + " WHERE kind = ?", [kind]
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY rowid", args).fetchall()
        return [dict(zip(("time", "stage", "step", "kind", "message", "payload"), r)) | {"payload": json.loads(r[5])} for r in rows]

    def count(self, stage: str | None = None) -> int:
        sql, args = "SELECT COUNT(*) FROM trajectories", []
        if stage is not None:
            sql, args = sql + " WHERE stage = ?", [stage]
        with self._lock:
            return int(self._db.execute(sql, args).fetchone()[0])
