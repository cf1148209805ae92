"""The run directory (docs/architecture.md, "Configuration and runs"): manifest, resolved config, store, metrics, checkpoints."""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from tracerl.errors import UserError
from tracerl.store.checkpoints import verify_checkpoint
from tracerl.store.sqlite import Store


class RunDir:
    """Paths and writers of one run. Creating one never overwrites an existing run."""

    def __init__(self, path: str | Path, *, create: bool = False):
        self.path = Path(path)
        if create:
            self.path.mkdir(parents=True, exist_ok=True)
            self.checkpoints.mkdir(exist_ok=True)
        elif not self.store_path.exists():
            raise UserError(f"{self.path} is not a tracerl run directory (no store.sqlite); pass the folder a `tracerl train` run wrote")
        self._store: Store | None = None
        self.sinks: list[Any] = []  # telemetry.loggers.MetricLoggers attach here: one path for every metric

    RUN_MARKERS = ("store.sqlite", "manifest.json", "config.yaml", "metrics.jsonl", "checkpoints")

    @classmethod
    def refuse_existing(cls, path: str | Path) -> None:
        """UserError when `path` already holds a run: a new run there would append to its store and replace its
        checkpoints, so it is refused before anything is written (`tracerl train --resume` continues it)."""
        path = Path(path)
        held = [m for m in cls.RUN_MARKERS if (path / m).exists()] if path.is_dir() else []
        if held:
            raise UserError(f"run.dir {path} already holds a run ({held[0]}); continue it with `tracerl train --resume "
                            f"{path}` or pick a new run.dir")

    def sweep_leftovers(self) -> list[str]:
        """Remove what a killed writer left: `.tmp-*` folders (a checkpoint or base model half written) and
        `.old-step_N-*` ones (a checkpoint being replaced: put back when its `step_N` is missing), in the run and
        its checkpoints folder, for writers whose process is gone. The names handled, for the log."""
        import shutil

        done = []
        for folder in (self.path, self.checkpoints):
            for p in sorted(folder.iterdir()) if folder.is_dir() else []:
                m = re.fullmatch(r"\.(tmp|old)-(.+)-(\d{1,10})", p.name)
                if not m or (int(m.group(3)) != os.getpid() and os.path.exists(f"/proc/{m.group(3)}")):
                    continue  # not a leftover, or its writer is alive
                final = folder / m.group(2)
                if m.group(1) == "old" and p.is_dir() and not p.is_symlink() and not final.exists():
                    os.rename(p, final)  # killed between the two renames: the replaced checkpoint was complete
                elif p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
                done.append(p.name)
        return done

    @classmethod
    def new(cls, root: str | Path, name: str) -> "RunDir":
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = Path(root) / f"{name}-{stamp}"
        i = 1
        while path.exists():
            path = Path(root) / f"{name}-{stamp}-{i}"
            i += 1
        return cls(path, create=True)

    # -- paths ------------------------------------------------------------------------------
    @property
    def store_path(self) -> Path:
        return self.path / "store.sqlite"

    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    @property
    def config_path(self) -> Path:
        return self.path / "config.yaml"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def report_dir(self) -> Path:
        return self.path / "report"

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store(self.store_path)
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    # -- writing --------------------------------------------------------------------------
    def write_config(self, config: dict[str, Any]) -> None:
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        self.manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))

    def read_manifest(self) -> dict[str, Any]:
        return json.loads(self.manifest_path.read_text())

    def log_metrics(self, metrics: dict[str, float], *, stage: str, step: int,
                    tags: dict[str, str] | None = None) -> None:
        """Append to metrics.jsonl and the store; non-finite values are kept as null. `tags` (e.g.
        `{"eval/protocol": column}`) are strings recorded beside these numbers, never in their names:
        a `tags` field in the JSONL row, a column in the store, a tag/param in each sink."""
        clean = {k: (float(v) if v is not None and math.isfinite(float(v)) else None) for k, v in metrics.items()}
        with self.metrics_path.open("a") as f:
            f.write(json.dumps({"stage": stage, "step": step, **({"tags": tags} if tags else {}), **clean}) + "\n")
        self.store.add_metrics(clean, stage=stage, step=step, tags=tags)
        for sink in self.sinks:
            sink.write(clean, stage=stage, step=step, tags=tags)

    @property
    def samples_path(self) -> Path:
        return self.path / "samples.jsonl"

    def log_samples(self, rows: list[dict[str, Any]], *, stage: str, step: int) -> None:
        """Append sample completions (one dict per row) to samples.jsonl and hand them to every sink."""
        with self.samples_path.open("a") as f:
            for row in rows:
                f.write(json.dumps({"stage": stage, "step": step, **row}, default=str) + "\n")
        for sink in self.sinks:
            sink.write_samples(rows, stage=stage, step=step)

    def read_metrics(self) -> list[dict[str, Any]]:
        if not self.metrics_path.exists():
            return []
        return [json.loads(line) for line in self.metrics_path.read_text().splitlines() if line.strip()]

    def latest_checkpoint(self, *, say=None) -> Path | None:
        """The newest complete checkpoint (`step_N` with a manifest whose files all match). Each
        newer folder passed over is named with the reason, through `say` (default: stderr), and
        kept in `self.skipped_checkpoints`; interrupted writes (.tmp-*) are ignored."""
        say = say or (lambda msg: print(msg, file=sys.stderr))
        self.skipped_checkpoints: list[tuple[str, str]] = []
        found = []
        for p in self.checkpoints.iterdir() if self.checkpoints.is_dir() else []:
            m = re.fullmatch(r"step_(\d{1,12})", p.name)
            if m and p.is_dir():
                found.append((int(m.group(1)), p))
            elif not p.name.startswith((".tmp-", ".old-")):
                self.skipped_checkpoints.append((p.name, "not a checkpoint folder named step_N"))
        for _, p in sorted(found, reverse=True):
            why = verify_checkpoint(p)
            if not why:
                for name, reason in self.skipped_checkpoints:
                    say(f"skipped checkpoint {name}: {reason}")
                return p
            self.skipped_checkpoints.append((p.name, why))
        for name, reason in self.skipped_checkpoints:
            say(f"skipped checkpoint {name}: {reason}")
        return None

    def marks(self) -> dict[str, int]:
        """The store's row marks plus the length of metrics.jsonl: what a checkpoint records."""
        marks = self.store.marks()
        marks["metrics_jsonl_bytes"] = self.metrics_path.stat().st_size if self.metrics_path.exists() else 0
        return marks

    def rollback(self, marks: dict[str, int] | None) -> dict[str, int]:
        """Put the store and metrics.jsonl back to `marks` (from the checkpoint a run resumes
        from): whatever a killed step wrote after it is removed, so the redone step replaces it."""
        if not marks:
            return {}
        removed = self.store.rollback(marks)
        size = int(marks.get("metrics_jsonl_bytes", 0))
        if self.metrics_path.exists() and self.metrics_path.stat().st_size > size:
            removed["metrics_jsonl_bytes"] = self.metrics_path.stat().st_size - size
            with self.metrics_path.open("r+b") as f:
                f.truncate(size)
                f.flush()
                os.fsync(f.fileno())
        return removed
