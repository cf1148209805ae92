"""The `loggers:` section of a recipe: metric sinks beside metrics.jsonl and the store
(`telemetry/loggers.py` attaches them)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tracerl.config.base import Cfg


class LoggersConfig(Cfg):
    """Where metrics go besides metrics.jsonl and the store (always written)."""

    tensorboard: bool = Field(False, description="Write TensorBoard event files to RUN_DIR/tensorboard.")
    wandb: bool = Field(False, description="Log to Weights & Biases.")
    wandb_project: str = Field("tracerl", description="W&B project name.")
    wandb_entity: str | None = Field(None, description="W&B entity (team or user); None uses the account default.")
    wandb_mode: Literal["offline", "online", "disabled"] = Field(
        "offline", description="W&B mode; offline writes RUN_DIR/wandb for a later `wandb sync`. "
        "A WANDB_MODE environment variable takes precedence.")
    mlflow: bool = Field(False, description="Log to MLflow.")
    mlflow_tracking_uri: str | None = Field(
        None, description="MLflow tracking URI; None uses a SQLite store at RUN_DIR/mlflow.db "
        "(MLflow 3 no longer accepts a plain file store), browsable with "
        "`mlflow ui --backend-store-uri sqlite:///RUN_DIR/mlflow.db`.")
    mlflow_experiment: str = Field("tracerl", description="MLflow experiment name.")
