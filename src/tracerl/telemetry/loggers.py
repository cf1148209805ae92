"""Metric sinks: metrics.jsonl and the store always; TensorBoard, W&B and MLflow when enabled.

There is one path for every number: `RunDir.log_metrics` writes metrics.jsonl and the store and
then hands the same numbers to each attached sink. `MetricLoggers` attaches itself to the run it
is built for, so held-out evaluation (which logs through the run directory) reaches TensorBoard,
W&B and MLflow exactly like training metrics do. Sample completions take the same route through
`RunDir.log_samples` (samples.jsonl; a TensorBoard text entry, a W&B table, an MLflow table).

Dashboard names are `<stage>/<name>`, except that a name already starting with its stage (`sft/loss`
logged under stage `sft`) is not prefixed again, passed through one sanitiser (`dashboard_key`) for
every backend, so TensorBoard, W&B and MLflow show the same name: `eval/avg@2` is `eval/avg_at_2` in
all three (MLflow refuses `@`). metrics.jsonl and the store keep the name as logged. Strings recorded
beside a batch of numbers (`tags`, e.g. `eval/protocol`: the evaluation's protocol column) become a
TensorBoard text entry, a W&B history value and an MLflow run tag under the same sanitised name.

The optional backends are extras (`pip install 'tracerl[tensorboard]'` etc.). One that is enabled
but not installed, or fails to start, prints one sentence and is skipped: a run never dies for
want of a dashboard, and metrics.jsonl keeps the full record.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from typing import Any

from tracerl.config.loggers import LoggersConfig
from tracerl.store.rundir import RunDir


def _failed(flag: str, package: str, err: Exception) -> str:
    if isinstance(err, ImportError):
        return (f"tracerl: loggers.{flag} is on but {package} is not installed; install it with "
                f"pip install 'tracerl[{flag}]' — continuing without it (metrics.jsonl keeps everything).")
    return (f"tracerl: loggers.{flag} is on but {package} failed to start ({type(err).__name__}: {err}); "
            f"continuing without it (metrics.jsonl keeps everything).")


def tag(stage: str, name: str) -> str:
    """The dashboard name of metric `name` logged under `stage`: `sft` + `sft/loss` is `sft/loss`."""
    root = stage.split("/", 1)[0]
    return name if name == root or name.startswith(root + "/") else f"{stage}/{name}"


def sanitize(key: str) -> str:
    """Letters, digits and `_-. /` only (what MLflow accepts, and W&B and TensorBoard show unchanged):
    `pass@4` becomes `pass_at_4`, any other character `_`."""
    key = key.replace("@", "_at_")
    return "".join(c if c.isalnum() or c in "_-. /" else "_" for c in key)


def dashboard_key(stage: str, name: str) -> str:
    """The name every dashboard backend shows for metric `name` logged under `stage`."""
    return sanitize(tag(stage, name))


def default_mlflow_uri(run: RunDir) -> str:
    return f"sqlite:///{(run.path / 'mlflow.db').resolve()}"


class MetricLoggers:
    """Fan every metric logged through the run directory out to the enabled sinks."""

    def __init__(self, run: RunDir, config: LoggersConfig | None = None, *, run_name: str | None = None,
                 hparams: dict[str, Any] | None = None):
        self.run, self.config = run, config or LoggersConfig()
        self.notes: list[str] = []
        self._tb = self._wandb = self._mlflow = None
        self._wandb_stages: set[str] = set()
        name = run_name or run.path.name
        cfg = self.config
        if cfg.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(log_dir=str(run.path / "tensorboard"))
            except Exception as err:  # ImportError when the extra is absent
                self._note(_failed("tensorboard", "tensorboard", err))
        if cfg.wandb:
            try:
                import wandb

                mode = os.environ.get("WANDB_MODE", cfg.wandb_mode)
                self._wandb = wandb.init(project=cfg.wandb_project, entity=cfg.wandb_entity, name=name,
                                         dir=str(run.path), mode=mode, config=hparams or {},
                                         **_wandb_quiet(wandb))
            except Exception as err:
                self._note(_failed("wandb", "wandb", err))
        if cfg.mlflow:
            try:
                import mlflow

                logging.getLogger("mlflow").setLevel(logging.WARNING)  # its INFO lines would bury the run's
                mlflow.set_tracking_uri(cfg.mlflow_tracking_uri or default_mlflow_uri(run))
                if cfg.mlflow_tracking_uri is None and mlflow.get_experiment_by_name(cfg.mlflow_experiment) is None:
                    # artifacts (sample tables) beside the store, not in ./mlruns of the current directory
                    mlflow.create_experiment(cfg.mlflow_experiment,
                                             artifact_location=(run.path / "mlartifacts").resolve().as_uri())
                mlflow.set_experiment(cfg.mlflow_experiment)
                mlflow.start_run(run_name=name)
                self._mlflow = mlflow
                if hparams:
                    mlflow.log_params(_flatten(hparams))
            except Exception as err:
                self._note(_failed("mlflow", "mlflow", err))
        run.sinks.append(self)

    def _note(self, message: str) -> None:
        self.notes.append(message)
        print(message, file=sys.stderr)

    @property
    def backends(self) -> list[str]:
        return ["jsonl"] + [n for n, b in (("tensorboard", self._tb), ("wandb", self._wandb), ("mlflow", self._mlflow)) if b]

    def log(self, metrics: dict[str, float], *, stage: str, step: int) -> None:
        """Log through the run directory: metrics.jsonl, the store, then every sink (`write`)."""
        self.run.log_metrics(metrics, stage=stage, step=step)

    def log_samples(self, rows: list[dict[str, Any]], *, stage: str, step: int) -> None:
        self.run.log_samples(rows, stage=stage, step=step)

    # -- called by RunDir for each logged batch ------------------------------------------------
    def write(self, metrics: dict[str, float | None], *, stage: str, step: int,
              tags: dict[str, str] | None = None) -> None:
        finite = {dashboard_key(stage, k): float(v) for k, v in metrics.items()
                  if v is not None and math.isfinite(float(v))}
        labels = {dashboard_key(stage, k): str(v) for k, v in (tags or {}).items()}
        if self._tb is not None:
            for k, v in finite.items():
                self._tb.add_scalar(k, v, step)
            for k, v in labels.items():
                self._tb.add_text(k, v, step)
            self._tb.flush()
        if self._wandb is not None:
            root = stage.split("/", 1)[0]
            if root not in self._wandb_stages:  # each stage's charts use its own step as the x axis
                self._wandb.define_metric(f"{root}/step")
                self._wandb.define_metric(f"{root}/*", step_metric=f"{root}/step")
                self._wandb_stages.add(root)
            self._wandb.log(finite | labels | {f"{root}/step": step})
        if self._mlflow is not None:
            self._mlflow.log_metrics(finite, step=step)
            if labels:  # a run tag holds the latest value; every step's is in metrics.jsonl and the store
                self._mlflow.set_tags(labels)

    def write_samples(self, rows: list[dict[str, Any]], *, stage: str, step: int) -> None:
        if not rows:
            return
        cols = list(rows[0])
        root = stage.split("/", 1)[0]
        if self._tb is not None:
            head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
            body = "".join("| " + " | ".join(_cell(r.get(c)) for c in cols) + " |\n" for r in rows)
            self._tb.add_text(f"{root}/samples", head + body, step)
            self._tb.flush()
        if self._wandb is not None:
            import wandb

            table = wandb.Table(columns=cols, data=[[r.get(c) for c in cols] for r in rows])
            self._wandb.log({f"{root}/samples": table, f"{root}/step": step})
        if self._mlflow is not None:
            self._mlflow.log_table({c: [r.get(c) for r in rows] for c in cols},
                                   artifact_file=f"samples/{root}_step_{step}.json")

    def close(self) -> None:
        if self in self.run.sinks:
            self.run.sinks.remove(self)
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
        if self._mlflow is not None:
            self._mlflow.end_run()


def _cell(v: Any) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")[:300]


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = str(v)[:500]  # MLflow caps parameter values
    return out


def _wandb_quiet(wandb) -> dict[str, Any]:
    """Keep W&B from wrapping the console (the run's own lines stay readable)."""
    settings = getattr(wandb, "Settings", None)
    return {"settings": settings(console="off", silent=True)} if settings else {}
