"""Read back what each logging backend wrote, the way a user's dashboard would see it."""

from __future__ import annotations

import json
import struct
from pathlib import Path


def tensorboard_scalars(run_path: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_path / "tensorboard"))
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def tensorboard_texts(run_path: Path) -> dict[str, list[str]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_path / "tensorboard"), size_guidance={"tensors": 0})
    acc.Reload()
    return {t: [e.tensor_proto.string_val[0].decode() for e in acc.Tensors(t)] for t in acc.Tags()["tensors"]}


def _leveldb_records(data: bytes):
    """Records of a W&B transaction log: a 7-byte file header, then LevelDB-log blocks of 32 KiB,
    each record a 7-byte header (crc32, length, type: 1 full, 2 first, 3 middle, 4 last)."""
    pos, block, buf = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:
            yield chunk
        elif kind == 2:
            buf = chunk
        elif kind == 3:
            buf += chunk
        elif kind == 4:
            yield buf + chunk


def wandb_offline(run_path: Path) -> tuple[list[dict], list[dict]]:
    """(history rows, metric definitions) of the single offline W&B run under RUN_DIR/wandb."""
    from wandb.proto import wandb_internal_pb2 as pb

    (log,) = (run_path / "wandb").glob("offline-run-*/run-*.wandb")
    history, metrics = [], []
    for raw in _leveldb_records(log.read_bytes()):
        rec = pb.Record()
        rec.ParseFromString(raw)
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item})
        elif kind == "metric":
            metrics.append({"name": rec.metric.name, "glob_name": rec.metric.glob_name,
                            "step_metric": rec.metric.step_metric})
    return history, metrics


def mlflow_metrics(run_path: Path) -> dict[str, list[tuple[int, float]]]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{(run_path / 'mlflow.db').resolve()}")
    (exp,) = [e for e in client.search_experiments() if e.name == "tracerl"]
    (run,) = client.search_runs([exp.experiment_id])
    return {k: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, k)] for k in run.data.metrics}


def mlflow_tags(run_path: Path) -> dict[str, str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{(run_path / 'mlflow.db').resolve()}")
    (exp,) = [e for e in client.search_experiments() if e.name == "tracerl"]
    (run,) = client.search_runs([exp.experiment_id])
    return dict(run.data.tags)
