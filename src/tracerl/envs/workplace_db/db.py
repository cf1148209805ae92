"""The office database (two tables in an in-memory SQLite) and the tool calls that act on it.

Tool calls are one line each, `op table key value …` (space-separated pairs, so that a name is
written the same way — after a space — in the request, the call and the result):
  find employees name kalo         -> matching rows, e.g. `id 2 name kalo team red`
  set tickets id 3 owner 2         -> update the row with that id (idempotent by nature)
  add employees name nemo team red -> insert; a retried add of an identical row returns the same id
  done                             -> finish; the final database state is what gets verified
Tables and columns are checked against the schema before any SQL runs, and values are bound as
parameters, so the policy cannot inject SQL. Deleting is forbidden (`blocked_action`).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3

SCHEMA = {
    "employees": {"id": int, "name": str, "team": str},
    "tickets": {"id": int, "topic": str, "owner": int, "status": str},
}
TEAMS = ("red", "blue", "green")
STATUSES = ("open", "closed")
FORBIDDEN_OPS = ("delete", "drop", "sql", "exec", "truncate")


class CallError(Exception):
    """A malformed or forbidden call: the policy's mistake, reported as an observation."""

    def __init__(self, kind: str, why: str) -> None:
        super().__init__(why)
        self.kind = kind


def connect(rows: dict[str, list[dict]]) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE employees (id INTEGER PRIMARY KEY, name TEXT NOT NULL, team TEXT NOT NULL)")
    conn.execute("CREATE TABLE tickets (id INTEGER PRIMARY KEY, topic TEXT NOT NULL, "
                 "owner INTEGER NOT NULL, status TEXT NOT NULL)")
    for table, table_rows in rows.items():
        for row in table_rows:
            cols = list(row)
            conn.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                         [row[c] for c in cols])
    return conn


def dump(conn: sqlite3.Connection) -> dict[str, list[list]]:
    return {t: [list(r) for r in conn.execute(f"SELECT * FROM {t} ORDER BY id")] for t in SCHEMA}


def digest(conn: sqlite3.Connection) -> str:
    return hashlib.sha256(json.dumps(dump(conn)).encode()).hexdigest()[:16]


def parse(call: str) -> tuple[str, str, dict]:
    words = call.strip().split()
    if not words:
        raise CallError("invalid_action", "empty call")
    op = words[0].lower()
    if op == "done" and len(words) == 1:
        return "done", "", {}
    if op in FORBIDDEN_OPS:
        raise CallError("blocked_action", f"{op} is not allowed")
    if op not in ("find", "set", "add") or len(words) < 3:
        raise CallError("invalid_action", "use: find|set|add TABLE key value …, or done")
    table = words[1]
    if table not in SCHEMA:
        raise CallError("invalid_action", f"no table {table!r}")
    args: dict = {}
    if len(words) % 2:
        raise CallError("invalid_action", "arguments come in pairs: key value")
    for key, value in zip(words[2::2], words[3::2]):
        if key not in SCHEMA[table] or key in args:
            raise CallError("invalid_action", f"bad argument {key!r}")
        if SCHEMA[table][key] is int:
            if not value.isdigit():
                raise CallError("invalid_action", f"{key} must be a number")
            value = int(value)
        args[key] = value
    return op, table, args


def execute(conn: sqlite3.Connection, op: str, table: str, args: dict) -> str:
    """Runs one parsed call and returns the result text. Raises CallError for the policy's mistakes;
    any sqlite3.Error that escapes is an infrastructure fault."""
    if op == "find":
        where = " AND ".join(f"{k} = ?" for k in args)
        rows = conn.execute(f"SELECT * FROM {table} WHERE {where} ORDER BY id", list(args.values())).fetchall()
        cols = list(SCHEMA[table])
        return " ; ".join(" ".join(f"{c} {v}" for c, v in zip(cols, r)) for r in rows) or "none"
    _check_values(conn, table, args)
    if op == "set":
        if "id" not in args or len(args) < 2:
            raise CallError("invalid_action", "set needs id=N and at least one column to change")
        row_id = args.pop("id")
        if conn.execute(f"SELECT 1 FROM {table} WHERE id = ?", [row_id]).fetchone() is None:
            return f"no {table} row id {row_id}"
        conn.execute(f"UPDATE {table} SET {', '.join(f'{k} = ?' for k in args)} WHERE id = ?",
                     [*args.values(), row_id])
        return "ok"
    if "id" in args or set(args) != set(SCHEMA[table]) - {"id"}:
        raise CallError("invalid_action", f"add {table} needs {' '.join(sorted(set(SCHEMA[table]) - {'id'}))}")
    where = " AND ".join(f"{k} = ?" for k in args)
    existing = conn.execute(f"SELECT id FROM {table} WHERE {where}", list(args.values())).fetchone()
    if existing is not None:  # a retried insert is a no-op that reports the same id
        return f"ok id {existing[0]}"
    cur = conn.execute(f"INSERT INTO {table} ({', '.join(args)}) VALUES ({', '.join('?' * len(args))})",
                       list(args.values()))
    return f"ok id {cur.lastrowid}"


def _check_values(conn: sqlite3.Connection, table: str, args: dict) -> None:
    if "team" in args and args["team"] not in TEAMS:
        raise CallError("invalid_action", f"team must be one of {', '.join(TEAMS)}")
    if "status" in args and args["status"] not in STATUSES:
        raise CallError("invalid_action", f"status must be one of {', '.join(STATUSES)}")
    if "owner" in args and conn.execute("SELECT 1 FROM employees WHERE id = ?", [args["owner"]]).fetchone() is None:
        raise CallError("invalid_action", f"no employee id {args['owner']}")
