"""Loggers: one path for every metric (held-out evaluation included) to JSONL, TensorBoard, W&B and
MLflow; each backend is read back from what it wrote. An absent backend is one line, not a crash."""

import json
import sys
import types

import pytest

from tracerl.contract import TerminalReason, TokenRole, Trajectory, ids_sha256
from tracerl.eval.protocol import Protocol
from tracerl.eval.record import record_evaluation
from tracerl.store import RunDir
from tracerl.telemetry import LoggersConfig, MetricLoggers
from tracerl.telemetry.loggers import dashboard_key, sanitize, tag


def test_jsonl_always_and_missing_backends_are_one_line(tmp_path, monkeypatch, capsys):
    for mod in ("tensorboard", "wandb", "mlflow"):
        monkeypatch.setitem(sys.modules, mod, None)  # import raises ImportError, as when not installed
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    run = RunDir(tmp_path / "run", create=True)
    loggers = MetricLoggers(run, LoggersConfig(tensorboard=True, wandb=True, mlflow=True))
    loggers.log({"reward/mean": 0.5, "policy/entropy": float("nan")}, stage="rl", step=3)
    loggers.close()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and len(loggers.notes) == 3
    for line, extra in zip(err, ("tensorboard", "wandb", "mlflow")):
        assert line.startswith(f"tracerl: loggers.{extra} is on but {extra} is not installed")
        assert f"tracerl[{extra}]" in line
    assert loggers.backends == ["jsonl"]
    rows = [json.loads(x) for x in run.metrics_path.read_text().splitlines()]
    assert rows == [{"stage": "rl", "step": 3, "reward/mean": 0.5, "policy/entropy": None}]
    assert [m["name"] for m in run.store.metrics()] == ["reward/mean", "policy/entropy"]
    run.close()


def test_tags_are_never_doubled():
    assert tag("sft", "sft/loss") == "sft/loss"
    assert tag("rl", "reward/mean") == "rl/reward/mean"
    assert tag("rl", "rl/stage") == "rl/stage"
    assert tag("eval", "eval/success") == "eval/success"
    assert tag("eval/0a3224f10c7d", "samples") == "eval/0a3224f10c7d/samples"
    # one sanitiser for every backend: the name a dashboard shows is the same in all three
    assert sanitize("eval/pass@4") == "eval/pass_at_4" and sanitize("a:b|c") == "a_b_c"
    assert dashboard_key("eval", "eval/avg@2") == "eval/avg_at_2" and dashboard_key("rl", "eval/pass@1") == "rl/eval/pass_at_1"


def test_wandb_env_mode_overrides_the_recipe(tmp_path, monkeypatch):
    calls = {}

    class FakeRun:
        def finish(self):
            calls["finished"] = True

    fake = types.SimpleNamespace(init=lambda **kw: calls.update(init=kw) or FakeRun())
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    run = RunDir(tmp_path / "run", create=True)
    MetricLoggers(run, LoggersConfig(wandb=True), hparams={"lr": 1e-5}).close()
    assert calls["init"]["mode"] == "offline" and calls["init"]["config"] == {"lr": 1e-5} and calls["finished"]
    monkeypatch.setenv("WANDB_MODE", "disabled")
    MetricLoggers(run, LoggersConfig(wandb=True, wandb_mode="online")).close()
    assert calls["init"]["mode"] == "disabled"
    assert run.sinks == []  # closing detaches: later metrics go to JSONL only
    run.close()


def _episode(task, i, correct):
    t = Trajectory(trajectory_id=f"{task}-{i}", group_id=f"eval-{task}", task_id=task, env_name="toy", split="heldout")
    t.append([1], TokenRole.PROMPT)
    s, e = t.append([2, 3], TokenRole.ACTION, logprobs=[-0.1, -0.2], policy_version=5)
    t.add_span("action", s, e, sampled_ids_sha256=ids_sha256([2, 3]))
    t.set_reward({"correct": float(correct)}, {"correct": 1.0})
    t.finish(TerminalReason.EOS)
    return t


def _a_logged_run(tmp_path, **flags):
    """SFT and RL metrics through MetricLoggers, and a held-out evaluation through record_evaluation
    (which only knows the run directory): task a ✓ ✗, task b ✗ ✗ → success 0.25, pass@2 0.5. The
    metric names carry no protocol hash (`eval/avg@2`); the column is the tag `eval/protocol`."""
    proto = Protocol(checkpoint_sha256="c" * 64, tokenizer_sha256="t" * 64, chat_template_sha256="h" * 64,
                     env_name="toy", env_revision="1", verifier_revision="1", tasks_sha256="x" * 64, num_tasks=2,
                     sampling={"temperature": 1.0}, budgets={"max_turns": 1}, n=2, ks=[1, 2])
    run = RunDir(tmp_path / "run", create=True)
    loggers = MetricLoggers(run, LoggersConfig(**flags), hparams={"rl": {"lr": 1e-5}})
    assert loggers.notes == []
    loggers.log({"sft/loss": 2.5}, stage="sft", step=1)
    loggers.log({"reward/mean": 0.75}, stage="rl", step=2)
    trajs = [_episode("a", 0, 1), _episode("a", 1, 0), _episode("b", 0, 0), _episode("b", 1, 0)]
    record_evaluation(run.path, proto, trajs, run=run, step=2)
    loggers.close()
    run.close()
    return run.path, proto.column


def test_tensorboard_receives_heldout_metrics_and_samples(tmp_path):
    pytest.importorskip("tensorboard")
    from backend_readers import tensorboard_scalars, tensorboard_texts

    path, col = _a_logged_run(tmp_path, tensorboard=True)
    scalars = tensorboard_scalars(path)
    assert scalars["sft/loss"] == [(1, 2.5)] and scalars["rl/reward/mean"] == [(2, 0.75)]
    assert scalars["eval/avg_at_2"] == [(2, 0.25)] and scalars["eval/pass_at_2"] == [(2, 0.5)]
    assert not [t for t in scalars if t.startswith(("sft/sft", "eval/eval", "rl/rl")) or col in t or "@" in t]
    texts = tensorboard_texts(path)
    assert texts["eval/protocol/text_summary"] == [col]  # the protocol beside the numbers, not in their names
    (table,) = texts["eval/samples/text_summary"]
    assert table.count("| a |") + table.count("| b |") == 4  # every sample row: 4 episodes ≤ the limit of 8


def test_wandb_offline_run_has_step_metrics_heldout_and_a_samples_table(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from backend_readers import wandb_offline

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    path, col = _a_logged_run(tmp_path, wandb=True)
    history, metrics = wandb_offline(path)
    assert {"glob_name": "eval/*", "step_metric": "eval/step", "name": ""} in metrics
    assert {"glob_name": "rl/*", "step_metric": "rl/step", "name": ""} in metrics
    evals = [h for h in history if "eval/avg_at_2" in h]
    assert len(evals) == 1 and evals[0]["eval/avg_at_2"] == 0.25 and evals[0]["eval/step"] == 2
    assert evals[0]["eval/protocol"] == col and not [k for h in history for k in h if col in k or "@" in k]
    assert any(h.get("sft/loss") == 2.5 and h["sft/step"] == 1 for h in history)
    tables = [h for h in history if h.get("eval/samples/_type") == "table-file"]
    assert len(tables) == 1 and tables[0]["eval/samples/nrows"] == 4
    saved = json.loads((next(path.glob("wandb/offline-run-*")) / "files" / tables[0]["eval/samples/path"]).read_text())
    assert saved["columns"] == ["task_id", "reward", "success", "terminal_reason", "completion"]


def test_mlflow_default_store_holds_heldout_metrics(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    from backend_readers import mlflow_metrics, mlflow_tags

    monkeypatch.chdir(tmp_path)  # nothing may land in the current directory
    path, col = _a_logged_run(tmp_path, mlflow=True)
    got, tags = mlflow_metrics(path), mlflow_tags(path)
    assert got["eval/avg_at_2"] == [(2, 0.25)] and got["sft/loss"] == [(1, 2.5)]
    assert tags["eval/protocol"] == col and not [k for k in got if col in k]
    assert got["rl/reward/mean"] == [(2, 0.75)]
    assert not (tmp_path / "mlruns").exists()
    assert list((path / "mlartifacts").rglob("eval_step_2.json"))  # the samples table


def test_jsonl_and_store_name_eval_metrics_readably_with_the_protocol_beside(tmp_path):
    path, col = _a_logged_run(tmp_path)  # jsonl and the store only
    rows = [json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines()]
    (ev,) = [r for r in rows if r["stage"] == "eval"]
    # task a ✓ ✗, task b ✗ ✗: avg@2 = (1/2 + 0)/2 = 0.25; pass@2 = (1 + 0)/2 = 0.5
    assert ev["step"] == 2 and ev["eval/avg@2"] == 0.25 and ev["eval/pass@2"] == 0.5
    assert ev["tags"] == {"eval/protocol": col} and not [k for k in ev if col in k]
    assert "tags" not in next(r for r in rows if r["stage"] == "rl")  # untagged rows stay as they were
    run = RunDir(path)
    stored = {m["name"]: m for m in run.store.metrics(stage="eval")}
    run.close()
    assert stored["eval/avg@2"]["value"] == 0.25 and stored["eval/avg@2"]["tags"] == {"eval/protocol": col}


def test_a_store_written_before_tags_opens_and_takes_tagged_metrics(tmp_path):
    import sqlite3

    db = sqlite3.connect(tmp_path / "old.sqlite")
    db.execute("CREATE TABLE metrics (stage TEXT NOT NULL, step INTEGER NOT NULL, name TEXT NOT NULL, value REAL, "
               "time REAL NOT NULL)")
    db.execute("INSERT INTO metrics VALUES ('rl', 1, 'reward/mean', 0.5, 0.0)")
    db.commit()
    db.close()
    from tracerl.store.sqlite import Store

    with Store(tmp_path / "old.sqlite") as store:
        store.add_metrics({"eval/avg@2": 0.25}, stage="eval", step=1, tags={"eval/protocol": "abc"})
        got = store.metrics()
    assert got[0]["name"] == "reward/mean" and "tags" not in got[0]
    assert got[1]["tags"] == {"eval/protocol": "abc"}
