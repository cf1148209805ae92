"""Loggers: JSONL always; an enabled but absent backend is one clear line, not a crash."""

import json
import sys
import types

from tracerl.store import RunDir
from tracerl.telemetry import LoggersConfig, MetricLoggers


def test_jsonl_always_and_missing_backends_are_one_line(tmp_path, monkeypatch, capsys):
    for mod in ("tensorboard", "wandb", "mlflow"):
        monkeypatch.setitem(sys.modules, mod, None)  # import raises ImportError, as when not installed
    run = RunDir(tmp_path / "run", create=True)
    loggers = MetricLoggers(run, LoggersConfig(tensorboard=True, wandb=True, mlflow=True))
    loggers.log({"reward/mean": 0.5, "policy/entropy": float("nan")}, stage="rl", step=3)
    loggers.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and len(loggers.notes) == 3
    for line, extra in zip(err, ("tensorboard", "wandb", "mlflow")):
        assert line.startswith(f"tracerl: loggers.{extra} is on") and f"tracerl[{extra}]" in line
    assert loggers.backends == ["jsonl"]
    rows = [json.loads(x) for x in run.metrics_path.read_text().splitlines()]
    assert rows == [{"stage": "rl", "step": 3, "reward/mean": 0.5, "policy/entropy": None}]
    assert [m["name"] for m in run.store.metrics()] == ["reward/mean", "policy/entropy"]
    run.close()


def test_wandb_offline_mode_and_env_override(tmp_path, monkeypatch):
    calls = {}

    class FakeRun:
        def log(self, data):
            calls.setdefault("log", []).append(data)

        def finish(self):
            calls["finished"] = True

    fake = types.SimpleNamespace(init=lambda **kw: calls.update(init=kw) or FakeRun())
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    run = RunDir(tmp_path / "run", create=True)
    loggers = MetricLoggers(run, LoggersConfig(wandb=True), hparams={"lr": 1e-5})
    assert calls["init"]["mode"] == "offline" and calls["init"]["config"] == {"lr": 1e-5}
    loggers.log({"reward/mean": 1.0, "policy/entropy": float("inf")}, stage="rl", step=1)
    assert calls["log"] == [{"rl/reward/mean": 1.0, "rl/step": 1}]  # non-finite values stay in JSONL only
    loggers.close()
    assert calls["finished"]
    monkeypatch.setenv("WANDB_MODE", "disabled")
    MetricLoggers(run, LoggersConfig(wandb=True, wandb_mode="online")).close()
    assert calls["init"]["mode"] == "disabled"
    run.close()
