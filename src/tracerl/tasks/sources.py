"""Task sources: local JSONL and Parquet files, saved Hugging Face datasets, and env generators.

Every source validates each row against the schema (`tracerl.tasks.schema`), keeps the good rows
and returns one `RowError` per bad row, so a file with a few bad lines still loads and the bad lines
can be fixed by number. A generator source names an environment; the caller that knows the
environments (`train/`, `commands/`) passes `generator_of` (`tracerl.envs.base.get_env`), which
turns that name into its generator, so this package never looks an environment up itself.
Nothing here touches the network: Hugging Face datasets are read from a
directory written by `Dataset.save_to_disk` (with the `datasets` package when installed, otherwise
straight from its Arrow files).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from tracerl.contract.task import Task, tasks_sha256
from tracerl.errors import UserError
from tracerl.config.tasks import TaskSourceConfig
from tracerl.tasks.schema import FIELDS, UNKNOWN_LICENSE, RowDefaults, RowError, RowProblem, row_to_task


class TaskGenerator(Protocol):
    """What a generator source needs of an environment (an `EnvSpec` is one): its name and its
    `generate(split, n, seed, difficulty) -> list[Task]`."""

    name: str
    generate: Callable[..., list[Task]]


GeneratorOf = Callable[[str], TaskGenerator]
"""An environment's name -> its generator; raises UserError (with the nearest name) for an unknown one."""


@dataclasses.dataclass
class LoadedSource:
    """The good tasks of one source, its bad rows, and the hashes recorded in the manifest."""

    name: str
    kind: str
    location: str
    tasks: list[Task]
    errors: list[RowError]
    content_sha256: str  # of the raw bytes read (files) or of the generated tasks (generators)

    @property
    def tasks_sha256(self) -> str:
        return tasks_sha256(self.tasks)

    def manifest_entry(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "location": self.location, "content_sha256": self.content_sha256,
                "tasks_sha256": self.tasks_sha256, "revisions": sorted({t.source_revision for t in self.tasks}),
                "num_tasks": len(self.tasks), "num_bad_rows": len(self.errors),
                "licenses": dict(sorted(Counter(t.license for t in self.tasks).items()))}


def validate_rows(rows: Iterable[tuple[int, Any]], defaults: RowDefaults, location: str, unit: str,
                  field_map: Mapping[str, str] | None = None,
                  extra_columns: str = "error") -> tuple[list[Task], list[RowError]]:
    """Validate (row number, row) pairs; duplicate ids are bad rows that name the first occurrence.
    `extra_columns: metadata` moves columns that are not schema fields under the row's `metadata`."""
    tasks: list[Task] = []
    errors: list[RowError] = []
    first_seen: dict[str, int] = {}
    for number, row in rows:
        if isinstance(row, RowError):
            errors.append(row)
            continue
        if field_map and isinstance(row, Mapping):
            row = {field_map.get(k, k): v for k, v in row.items()}
        if extra_columns == "metadata" and isinstance(row, Mapping):
            row = _extras_to_metadata(row)
        try:
            task = row_to_task(row, defaults)
        except RowProblem as err:
            errors.append(RowError(location, number, str(err), unit))
            continue
        if task.id in first_seen:
            errors.append(RowError(location, number, f"duplicate id {task.id!r} (first at {unit} {first_seen[task.id]})", unit))
            continue
        first_seen[task.id] = number
        tasks.append(task)
    _warn_unknown_license(location, tasks)
    return tasks, errors


def _extras_to_metadata(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row with every non-schema column under `metadata` (a column named like a metadata key wins)."""
    extras = {k: v for k, v in row.items() if k not in FIELDS}
    if not extras:
        return dict(row)
    meta = row.get("metadata")
    meta = dict(meta) if isinstance(meta, Mapping) else ({} if meta is None else meta)
    if isinstance(meta, dict):
        meta = {**meta, **extras}
    return {**{k: v for k, v in row.items() if k in FIELDS}, "metadata": meta}


_warned_license: set[str] = set()


def _warn_unknown_license(location: str, tasks: list[Task]) -> None:
    n = sum(t.license == UNKNOWN_LICENSE for t in tasks)
    if n and location not in _warned_license:
        _warned_license.add(location)
        print(f"tracerl: warning: {n} task(s) of {location} declare no license; recorded as "
              f"{UNKNOWN_LICENSE!r} in the manifest (set `license` on the source or on each row)", file=sys.stderr)


def _jsonl_rows(data: bytes, location: str) -> Iterable[tuple[int, Any]]:
    for number, raw in enumerate(data.splitlines(), start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            yield number, RowError(location, number, f"not valid UTF-8 ({err.reason} at byte {err.start})")
            continue
        if not text.strip():
            continue
        try:
            yield number, json.loads(text)
        except json.JSONDecodeError as err:
            yield number, RowError(location, number, f"not valid JSON ({err.msg} at column {err.colno})")
        except RecursionError:
            yield number, RowError(location, number, "JSON nested too deeply to read; flatten the row")


def _read_bytes(path: Path) -> bytes:
    if not path.exists():
        raise UserError(f"task file {str(path)!r} does not exist; check the path")
    if path.is_dir():
        raise UserError(f"{str(path)!r} is a directory; give a .jsonl or .parquet task file (or kind: hf for a saved dataset)")
    return path.read_bytes()


def _defaults(cfg: TaskSourceConfig, name: str, digest: str) -> RowDefaults:
    return RowDefaults(source=name, split=cfg.split, license=cfg.license, revision=cfg.revision or f"sha256:{digest[:12]}")


def load_jsonl(cfg: TaskSourceConfig) -> LoadedSource:
    path = Path(cfg.path)
    data = _read_bytes(path)
    digest = hashlib.sha256(data).hexdigest()
    name = cfg.name or path.stem
    tasks, errors = validate_rows(_jsonl_rows(data, str(path)), _defaults(cfg, name, digest), str(path), "line",
                                  cfg.field_map, cfg.extra_columns)
    return LoadedSource(name, "jsonl", str(path), tasks, errors, digest)


def load_parquet(cfg: TaskSourceConfig) -> LoadedSource:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError(f"{cfg.path!r} is a Parquet file and reading one needs pyarrow, which is not installed; "
                        "pip install pyarrow, or convert the file to JSONL") from None

    path = Path(cfg.path)
    data = _read_bytes(path)
    digest = hashlib.sha256(data).hexdigest()
    try:
        table = pq.read_table(pa.BufferReader(data))
    except pa.ArrowException as err:
        raise UserError(f"{str(path)!r} is not a readable Parquet file ({err}); re-export it") from None
    name = cfg.name or path.stem
    rows = enumerate(table.to_pylist(), start=1)
    tasks, errors = validate_rows(rows, _defaults(cfg, name, digest), str(path), "row", cfg.field_map, cfg.extra_columns)
    return LoadedSource(name, "parquet", str(path), tasks, errors, digest)


def _saved_dataset_dir(path: Path, split: str | None) -> Path:
    """The directory holding one split of a `save_to_disk` dataset (a DatasetDict has one per split)."""
    dict_file = path / "dataset_dict.json"
    if dict_file.exists():
        splits = json.loads(dict_file.read_text())["splits"]
        if split is None and len(splits) == 1:
            split = splits[0]
        if split not in splits:
            raise UserError(f"dataset {str(path)!r} has splits {', '.join(splits)}; choose one with hf_split")
        return path / split
    if not (path / "state.json").exists():
        raise UserError(f"{str(path)!r} is not a dataset saved with save_to_disk (no state.json or dataset_dict.json)")
    return path


def _read_arrow_rows(split_dir: Path) -> tuple[list[dict[str, Any]], str]:
    """Rows and content hash of a saved dataset split, read with pyarrow alone."""
    try:
        import pyarrow as pa
    except ImportError:
        raise UserError(f"{str(split_dir)!r} is a saved dataset and reading one needs pyarrow (or the datasets "
                        "package), which is not installed; pip install pyarrow") from None

    state = json.loads((split_dir / "state.json").read_text())
    h = hashlib.sha256()
    rows: list[dict[str, Any]] = []
    for entry in state["_data_files"]:
        raw = (split_dir / entry["filename"]).read_bytes()
        h.update(raw)
        try:
            table = pa.ipc.open_stream(pa.BufferReader(raw)).read_all()
        except pa.ArrowInvalid:
            table = pa.ipc.open_file(pa.BufferReader(raw)).read_all()
        rows.extend(table.to_pylist())
    return rows, h.hexdigest()


def load_hf(cfg: TaskSourceConfig) -> LoadedSource:
    path = Path(cfg.path)
    if not path.is_dir():
        raise UserError(f"dataset directory {str(path)!r} does not exist; save it with Dataset.save_to_disk first")
    split_dir = _saved_dataset_dir(path, cfg.hf_split)
    rows, digest = _read_arrow_rows(split_dir)
    try:
        import datasets  # optional: when present it must agree with the raw read
    except ImportError:
        datasets = None
    if datasets is not None:
        rows = list(datasets.load_from_disk(str(split_dir)))
    name = cfg.name or path.name
    tasks, errors = validate_rows(enumerate(rows, start=1), _defaults(cfg, name, digest), str(split_dir), "row", cfg.field_map, cfg.extra_columns)
    return LoadedSource(name, "hf", str(split_dir), tasks, errors, digest)


def load_generator(generate: Callable[..., list[Task]], *, name: str, split: str = "train", n: int = 1000,
                   seed: int = 0, difficulty: float | tuple[float, float] | None = None) -> LoadedSource:
    """Tasks from an env's `generate(split, n, seed, difficulty)`, checked like rows of a file.

    Every task's `source` becomes `name`, so two generator sources of one env are two mixture domains.
    """
    produced = list(generate(split, n, seed, difficulty))
    rows: list[tuple[int, Any]] = []
    for i, task in enumerate(produced, start=1):
        if not isinstance(task, Task):
            rows.append((i, RowError(name, i, f"generator returned {type(task).__name__}, not a Task", "task")))
        elif task.split != split:
            rows.append((i, RowError(name, i, f"generator was asked for split {split!r} but returned {task.split!r}", "task")))
        else:
            rows.append((i, {**task.to_dict(), "source": name}))
    tasks, errors = validate_rows(rows, RowDefaults(source=name, split=split), name, "task")
    digest = tasks_sha256(tasks)
    return LoadedSource(name, "generator", f"generator:{name}", tasks, errors, digest)


def load_source(cfg: TaskSourceConfig, *, generator_of: GeneratorOf | None = None) -> LoadedSource:
    """Load one source. A generator source needs `generator_of` (e.g. `tracerl.envs.base.get_env`)."""
    if cfg.kind == "jsonl":
        return load_jsonl(cfg)
    if cfg.kind == "parquet":
        return load_parquet(cfg)
    if cfg.kind == "hf":
        return load_hf(cfg)
    if generator_of is None:
        raise ValueError(f"task source {cfg.name or cfg.env!r} is generated by environment {cfg.env!r}: pass "
                         "generator_of (tracerl.envs.base.get_env) to load it")
    spec = generator_of(cfg.env)
    return load_generator(spec.generate, name=cfg.name or spec.name, split=cfg.split, n=cfg.n, seed=cfg.seed,
                          difficulty=cfg.difficulty)


def load_task_file(path: str, **overrides: Any) -> LoadedSource:
    """Load one task file or saved dataset directory, inferring its kind from the path."""
    return load_source(TaskSourceConfig(path=path, **overrides))


def require_tasks(loaded: LoadedSource) -> LoadedSource:
    """`loaded`, or a UserError when it holds no valid task (an empty file, or every row bad)."""
    if not loaded.tasks:
        first = f"; first problem: {loaded.errors[0]}" if loaded.errors else ""
        raise UserError(f"task source {loaded.location!r} has no valid task ({len(loaded.errors)} bad rows{first}); "
                        "fix the rows (`tracerl tasks check` lists them) or remove the source")
    return loaded


def check_sources(sources: list[TaskSourceConfig], *, generator_of: GeneratorOf | None = None) -> None:
    """Load every configured source once before a run starts, so that a missing, empty or wholly
    bad task file (or an unknown generator environment) stops it with one sentence before anything
    is written."""
    for cfg in sources:
        require_tasks(load_source(cfg, generator_of=generator_of))
