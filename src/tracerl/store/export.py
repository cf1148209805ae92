"""`tracerl export`: one record per trajectory, with the trajectory contract's field names.

Each record carries, besides the contract fields:

- `stage` and `step`: where the episode was stored (`rl`, `rl_filtered`, `profile`, `eval/<protocol>`)
  and the RL step (or evaluation step) it belongs to;
- `prompt_text` and `completion_text`: the tokens before the first action, and from the first action
  on (actions and observations), decoded with the run's own tokenizer (`RUN_DIR/tokenizer`);
- `advantage` and `loss_weight`: what the learner gave the trajectory (`store.credit`), null for
  episodes that never reached an update (evaluation, profiling, filtered groups).

`step` is the number the console, metrics.jsonl and checkpoints use: an RL episode's is the update
that trained on it (1..N; `rl step 2/N`, checkpoint `step_2`), an evaluation's the number of updates
before it (0 before RL).

`--format messages` writes instead one OpenAI `messages` conversation per episode (store/messages.py),
a file `sft.data` trains on; `--correct` keeps only the episodes that succeeded (`contract.is_success`).

A stage filter matches by prefix at `/` boundaries: `--stage eval` selects `eval/<hash>` too. A
filter that matches nothing is an error naming the stages the run has, and writes no file.
Parquet keeps nested fields as structs (spans as a list of structs); JSON-free-form fields whose
keys vary between runs (`verifier_output`, `sampling`) are JSON text.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from tracerl.contract import TokenRole
from tracerl.contract.serialize import from_dict, to_dict, unpack_arrays
from tracerl.errors import UserError
from tracerl.store.credit import read_credit
from tracerl.store.rundir import RunDir

_JSON_TEXT = ("verifier_output", "sampling")


def run_tokenizer(run: RunDir):
    """The tokenizer a run saved in RUN_DIR/tokenizer, or None (then text columns are empty)."""
    path = run.path / "tokenizer"
    if not path.is_dir():
        return None
    cached = getattr(run, "_tokenizer", None)
    if cached is None:
        from transformers import AutoTokenizer

        cached = AutoTokenizer.from_pretrained(str(path))
        run._tokenizer = cached
    return cached


def decode_parts(traj, tokenizer) -> tuple[str, str]:
    """(prompt text, completion text): before the first ACTION token, and from it on."""
    if tokenizer is None:
        return "", ""
    first = next((i for i, r in enumerate(traj.roles) if r == TokenRole.ACTION), len(traj.token_ids))
    ids = [i for i, r in zip(traj.token_ids, traj.roles) if r != TokenRole.PAD]
    cut = sum(1 for r in traj.roles[:first] if r != TokenRole.PAD)
    return tokenizer.decode(ids[:cut]), tokenizer.decode(ids[cut:])


def stages(run: RunDir) -> list[str]:
    with sqlite3.connect(f"file:{run.store_path}?mode=ro", uri=True) as db:
        return [r[0] for r in db.execute("SELECT DISTINCT stage FROM trajectories ORDER BY stage")]


def stage_matches(stage: str, wanted: str) -> bool:
    return stage == wanted or stage.startswith(wanted.rstrip("/") + "/")


def rows(run: RunDir, *, stage: str | None = None, step: int | None = None) -> Iterator[tuple[str, int, Any]]:
    """(stage, step, trajectory) in storage order, filtered by stage prefix and step."""
    sql = "SELECT stage, step, meta, token_ids, roles, behavior_logprobs, policy_versions FROM trajectories"
    where, args = [], []
    if stage is not None:
        where.append("(stage = ? OR stage LIKE ? ESCAPE '\\')")
        prefix = stage.rstrip("/").replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        args += [stage, prefix + "/%"]
    if step is not None:
        where.append("step = ?")
        args.append(step)
    if where:
        sql += " WHERE " + " AND ".join(where)
    with sqlite3.connect(f"file:{run.store_path}?mode=ro", uri=True) as db:
        found = db.execute(sql + " ORDER BY rowid", args).fetchall()
    for st, sp, meta, *blobs in found:
        d = json.loads(meta)
        d.update(unpack_arrays(dict(zip(("token_ids", "roles", "behavior_logprobs", "policy_versions"), blobs))))
        yield st, sp, from_dict(d)


def records(run: RunDir, *, stage: str | None = None, step: int | None = None) -> Iterator[dict[str, Any]]:
    tok = run_tokenizer(run)
    credit = read_credit(run.store)
    for st, sp, traj in rows(run, stage=stage, step=step):
        prompt, completion = decode_parts(traj, tok)
        c = credit.get(traj.trajectory_id, {})
        yield {"stage": st, "step": sp, **to_dict(traj), "prompt_text": prompt, "completion_text": completion,
               "advantage": c.get("advantage"), "loss_weight": c.get("loss_weight")}


def _check_filter(run: RunDir, stage: str | None, step: int | None) -> None:
    have = stages(run)
    if stage is not None and not any(stage_matches(s, stage) for s in have):
        raise UserError(f"no trajectories of stage {stage!r} in {run.path}; its stages are "
                        f"{', '.join(sorted({s.split('/')[0] for s in have})) or 'none (nothing stored yet)'}")
    if next(rows(run, stage=stage, step=step), None) is None:
        what = f"stage {stage!r} at step {step}" if stage else f"step {step}"
        raise UserError(f"no trajectories of {what} in {run.path}; pick a step the run stored (see `tracerl inspect`)")


def export_jsonl(run: RunDir, out: IO[str], *, stage: str | None = None, step: int | None = None) -> int:
    n = 0
    for rec in records(run, stage=stage, step=step):
        out.write(json.dumps(rec) + "\n")
        n += 1
    return n


def _parquet_record(rec: dict[str, Any]) -> dict[str, Any]:
    rec = dict(rec)
    for key in _JSON_TEXT:
        rec[key] = json.dumps(rec[key])
    # a struct needs fixed keys; reward components vary by env, so they are a list of {name, value}
    for key in ("reward_components", "reward_weights"):
        rec[key] = [{"name": k, "value": float(v)} for k, v in rec[key].items()]
    adv = rec.pop("advantage")
    rec["advantage"] = adv if not isinstance(adv, list) else None
    rec["token_advantages"] = adv if isinstance(adv, list) else None
    return rec


def export_parquet(run: RunDir, path: Path, *, stage: str | None = None, step: int | None = None) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    recs = [_parquet_record(r) for r in records(run, stage=stage, step=step)]
    span = pa.struct([("span_id", pa.int64()), ("parent_span_id", pa.int64()), ("kind", pa.string()),
                      ("start", pa.int64()), ("end", pa.int64()), ("tool_name", pa.string()),
                      ("tool_request", pa.string()), ("tool_status", pa.string()), ("tool_latency_s", pa.float64()),
                      ("tool_response_sha256", pa.string()), ("state_hash", pa.string()),
                      ("sampled_ids_sha256", pa.string())])
    named = pa.list_(pa.struct([("name", pa.string()), ("value", pa.float64())]))
    fixed = {"spans": pa.list_(span), "reward_components": named, "reward_weights": named,
             "advantage": pa.float64(), "token_advantages": pa.list_(pa.float64()), "loss_weight": pa.float64(),
             "behavior_logprobs": pa.list_(pa.float64()), "step": pa.int64()}
    inferred = pa.Table.from_pylist(recs).schema if recs else pa.schema([])
    schema = pa.schema([pa.field(f.name, fixed.get(f.name, f.type)) for f in inferred])
    pq.write_table(pa.Table.from_pylist(recs, schema=schema), path)
    return len(recs)


def export_messages(run: RunDir, out: IO[str], *, stage: str | None = None, step: int | None = None,
                    correct: bool = False) -> tuple[int, int]:
    """One `{"id", "messages", ...}` line per episode (an `sft.data` file); returns (written, skipped: no action)."""
    from tracerl.contract import is_success
    from tracerl.store.messages import messages_row

    tok = run_tokenizer(run)
    if tok is None:
        raise UserError(f"{run.path} has no tokenizer folder, so its tokens cannot be turned back into messages; "
                        "export a run that `tracerl train` wrote (it saves RUN_DIR/tokenizer)")
    n = skipped = 0
    for st, sp, traj in rows(run, stage=stage, step=step):
        if correct and not is_success(traj):
            continue
        row = messages_row(st, sp, traj, tok)
        if row is None:
            skipped += 1
            continue
        out.write(json.dumps(row, ensure_ascii=False) + "\n")
        n += 1
    return n, skipped


def export(run_dir: str, fmt: str, out: str | None, stage: str | None = None, step: int | None = None,
           correct: bool = False) -> int:
    run = RunDir(run_dir)
    try:
        if fmt == "parquet" and not out:
            raise UserError("parquet is binary; give a file with --out FILE.parquet")
        if stage is not None or step is not None:
            _check_filter(run, stage, step)  # before any file is opened: a bad filter writes nothing
        if fmt == "messages":
            with (open(out, "w", encoding="utf-8") if out else _Unclosed(sys.stdout)) as f:
                n, skipped = export_messages(run, f, stage=stage, step=step, correct=correct)
            if skipped:
                print(f"{skipped} episode(s) without an action left out (nothing to train on)", file=sys.stderr)
            return n
        if correct:
            raise UserError("--correct selects episodes for an SFT file; use it with --format messages")
        if fmt == "parquet":
            return export_parquet(run, Path(out), stage=stage, step=step)
        if out:
            with open(out, "w") as f:
                return export_jsonl(run, f, stage=stage, step=step)
        return export_jsonl(run, sys.stdout, stage=stage, step=step)
    finally:
        run.close()


class _Unclosed:
    """Standard output as a context manager that leaves it open."""

    def __init__(self, stream):
        self.stream = stream

    def __enter__(self):
        return self.stream

    def __exit__(self, *exc):
        self.stream.flush()
