"""Evaluation protocols: a number is only comparable with numbers measured the same way.

A `Protocol` records everything that changes an evaluation number:
the model (checkpoint hash), the tokenizer and chat template, the task set and its revision,
the environment and verifier revisions, sampling parameters, budgets, the sample count n, the k
list and the aggregation rule.

Two hashes come from it:

- `column`: everything except the checkpoint. Numbers that share a column were measured by the
  same procedure and may be compared (e.g. held-out success over training checkpoints);
- `sha256`: the full record, including the checkpoint; it names one measurement.

Results are written as `<root>/eval/<column>/<checkpoint>/{protocol.json,results.json,per_task.jsonl}`
and logged as metrics `eval/<name>` with the column recorded beside them as the tag `eval/protocol`
(eval/record.py), so a reader can tell numbers of different protocols apart without hashes in names.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tracerl.eval.aggregate import Sample

AGGREGATION = ("tasks weighted equally; avg@n = mean c/n; pass@k unbiased (Chen et al. 2021); "
               "maj@k over disjoint chunks of k samples in sampling order")


class Protocol(BaseModel):
    """The frozen description of one evaluation."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    checkpoint_sha256: str = Field(description="SHA-256 of the evaluated weights (models.load.model_sha256).")
    tokenizer_sha256: str = Field(description="SHA-256 of the tokenizer vocabulary and merges.")
    chat_template_sha256: str = Field(description="SHA-256 of the chat template text.")
    env_name: str = Field(description="Environment the tasks run in.")
    env_revision: str = Field(description="Revision of the environment code.")
    verifier_revision: str = Field(description="Revision of the verifier that scores an episode.")
    split: str = Field("heldout", description="Task split; held-out tasks never produced training reward.")
    tasks_sha256: str = Field(description="Content hash of the ordered task list (contract.task.tasks_sha256): the denominator.")
    num_tasks: int = Field(description="Number of tasks evaluated.")
    sampling: dict[str, Any] = Field(description="Sampling parameters (temperature, top_p, top_k, ...).")
    budgets: dict[str, int] = Field(description="Episode budgets (max_turns, max_tokens, max_new_tokens).")
    n: int = Field(description="Samples per task.")
    ks: list[int] = Field(description="k values of pass@k and maj@k.")
    seed: int = Field(0, description="Seed of sampling and environment resets.")
    aggregation: str = Field(AGGREGATION, description="How samples become numbers.")
    success: str = Field("reward component 'correct' (else 'success', else reward) >= 1",
                         description="What counts as a correct sample.")

    def _digest(self, exclude: set[str]) -> str:
        body = json.dumps(self.model_dump(exclude=exclude), sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(body.encode()).hexdigest()

    @property
    def sha256(self) -> str:
        return self._digest(set())

    @property
    def column(self) -> str:
        """12 hex digits naming the procedure without the checkpoint."""
        return self._digest({"checkpoint_sha256"})[:12]



def results_dir(root: str | Path, protocol: Protocol) -> Path:
    return Path(root) / "eval" / protocol.column / protocol.checkpoint_sha256[:12]


def write_results(root: str | Path, protocol: Protocol, results: dict[str, float],
                  per_task: dict[str, list[Sample]] | None = None) -> Path:
    """Write the protocol beside its numbers; refuse to mix two protocols in one folder."""
    out = results_dir(root, protocol)
    out.mkdir(parents=True, exist_ok=True)
    record = out / "protocol.json"
    if record.exists() and json.loads(record.read_text()).get("sha256") != protocol.sha256:
        raise ValueError(f"{out} already holds results of a different protocol; refusing to mix them")
    record.write_text(json.dumps({"sha256": protocol.sha256, "column": protocol.column,
                                  **protocol.model_dump()}, indent=2, sort_keys=True))
    (out / "results.json").write_text(json.dumps(
        {"protocol_sha256": protocol.sha256, "column": protocol.column, "time": time.time(),
         "results": results}, indent=2, sort_keys=True))
    if per_task is not None:
        with (out / "per_task.jsonl").open("w") as f:
            for task_id, samples in per_task.items():
                f.write(json.dumps({"task_id": task_id, "correct": [bool(s.correct) for s in samples],
                                    "answers": [None if s.answer is None else str(s.answer) for s in samples],
                                    "tool_calls": [s.tool_calls for s in samples]}) + "\n")
    return out


def read_results(root: str | Path) -> list[dict[str, Any]]:
    """Every stored evaluation under root/eval: {"protocol": {...}, "results": {...}, "path": ...}."""
    found = []
    for rec in sorted(Path(root).glob("eval/*/*/protocol.json")):
        res = rec.parent / "results.json"
        if res.exists():
            found.append({"protocol": json.loads(rec.read_text()), "results": json.loads(res.read_text())["results"],
                          "path": str(rec.parent)})
    return found
