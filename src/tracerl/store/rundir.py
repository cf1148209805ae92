"""The run directory (DESIGN.md §8): manifest, resolved config, store, metrics, checkpoints."""

from __future__ import annotations

import datetime as _dt
import json
import math
from pathlib import Path
from typing import Any

import yaml

from tracerl.errors import UserError
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

    def log_metrics(self, metrics: dict[str, float], *, stage: str, step: int) -> None:
        """Append to metrics.jsonl and the store; non-finite values are kept as null."""
        clean = {k: (float(v) if v is not None and math.isfinite(float(v)) else None) for k, v in metrics.items()}
        with self.metrics_path.open("a") as f:
            f.write(json.dumps({"stage": stage, "step": step, **clean}) + "\n")
        self.store.add_metrics(clean, stage=stage, step=step)

    def read_metrics(self) -> list[dict[str, Any]]:
        if not self.metrics_path.exists():
            return []
        return [json.loads(line) for line in self.metrics_path.read_text().splitlines() if line.strip()]

    def latest_checkpoint(self) -> Path | None:
        steps = sorted(self.checkpoints.glob("step_*"), key=lambda p: int(p.name.split("_")[1]))
        return steps[-1] if steps else None
