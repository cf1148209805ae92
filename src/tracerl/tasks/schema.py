"""The declared schema of a task row, and its validation with one reason per bad row.

A row is a mapping with these fields (anything else is an error, so that a misspelt column is not
silently dropped; rename columns with a source's `field_map` or nest extras under `metadata`):

| field | type | required |
| --- | --- | --- |
| `id` | non-empty string (an integer is accepted and turned into a string) | yes, unique in the source |
| `prompt` | non-empty string, or a list of `{role, content}` messages | yes |
| `answer` / `tests` | any JSON value | at least one of the two |
| `split` | `train` or `heldout` | no: the source's default split |
| `metadata` | object (a JSON string of an object is accepted, as Parquet often stores one) | no |
| `license` | non-empty string | no: the source's license, else `unknown` (recorded in the manifest, warned once per source) |
| `source_revision` | string | no: the source's revision (by default the file's content hash) |
| `difficulty` | finite number | no |
| `source` | string | no: the source's name (lets one file hold several domains) |
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

from tracerl.contract.task import SPLITS, Task

FIELDS = ("id", "prompt", "answer", "tests", "split", "metadata", "license", "source_revision", "difficulty", "source")
UNKNOWN_LICENSE = "unknown"
ROLES = ("system", "user", "assistant", "tool")


@dataclasses.dataclass(frozen=True)
class RowError:
    """One bad row: where it is (1-based line of a JSONL file, row of a table) and why it was rejected."""

    path: str
    line: int
    reason: str
    unit: str = "line"  # "line" for JSONL, "row" for Parquet / datasets, "task" for generators

    def __str__(self) -> str:
        return f"{self.path}: {self.unit} {self.line}: {self.reason}"


class RowProblem(ValueError):
    """Raised by `row_to_task` with the reason a row breaks the schema."""


@dataclasses.dataclass(frozen=True)
class RowDefaults:
    """What a source supplies for fields its rows leave out."""

    source: str
    split: str = "train"
    license: str | None = None
    revision: str = ""


def row_to_task(row: Any, defaults: RowDefaults) -> Task:
    """Validate one row against the schema and build its Task, or raise RowProblem naming the first fault."""
    if not isinstance(row, Mapping):
        raise RowProblem(f"a row must be an object with the task fields, got {type(row).__name__}")
    row = {k: v for k, v in row.items() if v is not None}
    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise RowProblem(
            f"unknown field {unknown[0]!r}; known fields are {', '.join(FIELDS)} "
            "(rename it with the source's field_map or move it under metadata)")
    task_id = _id(row.get("id"))
    prompt = _prompt(row.get("prompt"))
    if "answer" not in row and "tests" not in row:
        raise RowProblem("the row needs an `answer` or `tests` (both are missing or null)")
    split = row.get("split", defaults.split)
    if split not in SPLITS:
        raise RowProblem(f"split is {split!r}; use one of {', '.join(SPLITS)}")
    metadata = _metadata(row.get("metadata", {}))
    license_ = row.get("license", defaults.license)
    if license_ is None:  # missing provenance is recorded, not fatal: a first task file should just load
        license_ = UNKNOWN_LICENSE
    if not isinstance(license_, str) or not license_.strip():
        raise RowProblem(f"license must be a non-empty string, got {license_!r} (or leave it out: it is then "
                         f"recorded as {UNKNOWN_LICENSE!r})")
    revision = row.get("source_revision", defaults.revision)
    if not isinstance(revision, str):
        raise RowProblem(f"source_revision must be a string, got {type(revision).__name__}")
    difficulty = row.get("difficulty")
    if difficulty is not None:
        if isinstance(difficulty, bool) or not isinstance(difficulty, int | float) or not math.isfinite(difficulty):
            raise RowProblem(f"difficulty must be a finite number, got {difficulty!r}")
        difficulty = float(difficulty)
    source = row.get("source", defaults.source)
    if not isinstance(source, str) or not source:
        raise RowProblem(f"source must be a non-empty string, got {source!r}")
    return Task(id=task_id, source=source, prompt=prompt, split=split, source_revision=revision,
                answer=row.get("answer"), tests=row.get("tests"), difficulty=difficulty,
                metadata=metadata, license=license_)


def _id(value: Any) -> str:
    if value is None:
        raise RowProblem("the row has no `id`")
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise RowProblem(f"id must be a string, got {type(value).__name__}")
    text = str(value)
    if not text.strip():
        raise RowProblem("id is empty")
    return text


def _prompt(value: Any) -> str | list[dict[str, str]]:
    if value is None:
        raise RowProblem("the row has no `prompt`")
    if isinstance(value, str):
        if not value.strip():
            raise RowProblem("prompt is empty")
        return value
    if isinstance(value, list) and value:
        messages = []
        for i, m in enumerate(value):
            if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise RowProblem(f"prompt message {i} must be an object with string `role` and `content`")
            if m["role"] not in ROLES:
                raise RowProblem(f"prompt message {i} has role {m['role']!r}; use one of {', '.join(ROLES)}")
            messages.append({"role": m["role"], "content": m["content"]})
        if not any(m["content"].strip() for m in messages):
            raise RowProblem("every prompt message is empty")
        return messages
    raise RowProblem(f"prompt must be a non-empty string or list of messages, got {type(value).__name__}")


def _metadata(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise RowProblem("metadata is a string that is not a JSON object") from None
    if not isinstance(value, Mapping):
        raise RowProblem(f"metadata must be an object, got {type(value).__name__}")
    return dict(value)
