"""Metric sinks: metrics.jsonl and the store always; TensorBoard, W&B and MLflow when enabled.

The optional backends are extras (`pip install 'tracerl[tensorboard]'` etc.). One that is enabled
but not installed, or fails to start, prints one sentence and is skipped: a run never dies for
want of a dashboard, and metrics.jsonl keeps the full record.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tracerl.store.rundir import RunDir


class LoggersConfig(BaseModel):
    """Where metrics go besides metrics.jsonl and the store (always written)."""

    model_config = ConfigDict(extra="forbid")
    tensorboard: bool = Field(False, description="Write TensorBoard event files to RUN_DIR/tensorboard.")
    wandb: bool = Field(False, description="Log to Weights & Biases.")
    wandb_project: str = Field("tracerl", description="W&B project name.")
    wandb_entity: str | None = Field(None, description="W&B entity (team or user); None uses the account default.")
    wandb_mode: Literal["offline", "online", "disabled"] = Field(
        "offline", description="W&B mode; offline writes RUN_DIR/wandb for a later `wandb sync`. "
        "A WANDB_MODE environment variable takes precedence.")
    mlflow: bool = Field(False, description="Log to MLflow.")
    mlflow_tracking_uri: str | None = Field(
        None, description="MLflow tracking URI; None uses a local file store at RUN_DIR/mlruns.")
    mlflow_experiment: str = Field("tracerl", description="MLflow experiment name.")


def _missing(flag: str, package: str, extra: str, err: Exception) -> str:
    return (f"tracerl: loggers.{flag} is on but {package} could not be started ({type(err).__name__}: {err}); "
            f"install it with pip install 'tracerl[{extra}]' — continuing with metrics.jsonl only.")


class MetricLoggers:
    """Fan one step's metrics out to every enabled sink."""

    def __init__(self, run: RunDir, config: LoggersConfig | None = None, *, run_name: str | None = None,
                 hparams: dict[str, Any] | None = None):
        self.run, self.config = run, config or LoggersConfig()
        self.notes: list[str] = []
        self._tb = self._wandb = self._mlflow = None
        name = run_name or run.path.name
        cfg = self.config
        if cfg.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(log_dir=str(run.path / "tensorboard"))
            except Exception as err:  # ImportError when the extra is absent
                self._note(_missing("tensorboard", "tensorboard", "tensorboard", err))
        if cfg.wandb:
            try:
                import wandb

                mode = os.environ.get("WANDB_MODE", cfg.wandb_mode)
                self._wandb = wandb.init(project=cfg.wandb_project, entity=cfg.wandb_entity, name=name,
                                         dir=str(run.path), mode=mode, config=hparams or {})
            except Exception as err:
                self._note(_missing("wandb", "wandb", "wandb", err))
        if cfg.mlflow:
            try:
                import mlflow

                mlflow.set_tracking_uri(cfg.mlflow_tracking_uri or (run.path / "mlruns").resolve().as_uri())
                mlflow.set_experiment(cfg.mlflow_experiment)
                mlflow.start_run(run_name=name)
                self._mlflow = mlflow
                if hparams:
                    mlflow.log_params(_flatten(hparams))
            except Exception as err:
                self._note(_missing("mlflow", "mlflow", "mlflow", err))

    def _note(self, message: str) -> None:
        self.notes.append(message)
        print(message, file=sys.stderr)

    @property
    def backends(self) -> list[str]:
        return ["jsonl"] + [n for n, b in (("tensorboard", self._tb), ("wandb", self._wandb), ("mlflow", self._mlflow)) if b]

    def log(self, metrics: dict[str, float], *, stage: str, step: int) -> None:
        self.run.log_metrics(metrics, stage=stage, step=step)
        finite = {f"{stage}/{k}": float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}
        if self._tb is not None:
            for k, v in finite.items():
                self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            self._wandb.log(finite | {f"{stage}/step": step})
        if self._mlflow is not None:
            self._mlflow.log_metrics({k.replace("@", "_at_"): v for k, v in finite.items()}, step=step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
        if self._mlflow is not None:
            self._mlflow.end_run()


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = str(v)[:500]  # MLflow caps parameter values
    return out
