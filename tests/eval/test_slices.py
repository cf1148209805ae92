"""Evaluation slices under tool faults: what each slice changes, and the CLI report beside the clean run."""

import json

import pytest

from tracerl.cli import main
from tracerl.config import load_recipe
from tracerl.envs import get_env
from tracerl.errors import UserError
from tracerl.eval.slices import TOOL_ERROR, _perturb, slice_spec


def test_perturb_moves_whole_integers_only():
    assert _perturb("<output>12</output>") == "<output>13</output>"
    assert _perturb("x = 3, y = -4.5, id7, -2") == "x = 4, y = -4.5, id7, -1"


@pytest.mark.parametrize("kind,expect", [("tool_error", TOOL_ERROR), ("tool_wrong", "<output>13</output>")])
def test_a_slice_changes_tool_observations_and_nothing_else(kind, expect):
    spec = get_env("math_tool")
    task = spec.generate("heldout", 1, 0)[0]
    env = slice_spec(spec, kind).make()
    env.reset(task, 0)
    step = env.step("<code>print(12)</code>")
    assert step.observation.strip() == expect and step.info["eval_slice"] == kind
    final = env.step(f"<answer>{task.answer}</answer>")  # the verdict is the env's own
    assert final.terminated and final.reward_components["correct"] == 1.0


def test_tool_error_once_errors_the_first_call_only():
    spec = get_env("math_tool")
    task = spec.generate("heldout", 1, 0)[0]
    env = slice_spec(spec, "tool_error_once").make()
    for _ in range(2):  # per episode: reset starts the count again
        env.reset(task, 0)
        assert env.step("<code>print(12)</code>").observation.strip() == TOOL_ERROR
        assert env.step("<code>print(12)</code>").observation.strip() == "<output>12</output>"  # the call again works
    final = env.step(f"<answer>{task.answer}</answer>")
    assert final.terminated and final.reward_components["correct"] == 1.0


def test_the_faults_slice_needs_faults():
    with pytest.raises(UserError, match="eval.slices lists faults but no fault rate is set"):
        load_recipe("smoke", ["eval.slices=[faults]"])


def test_cli_reports_slices_beside_a_clean_evaluation(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc = main(["train", "smoke", "stages=[sft,eval]", "run.threads=1", "run.dir=run", "sft.epochs=4",
               "eval.slices=[tool_error,tool_error_once,tool_wrong,faults]", "faults.tool_crash=0.5", "faults.engine_error=0.2"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "eval slices: tool_error: " in out and "faults: " in out and "used_tool: " in out
    [e] = json.loads((tmp_path / "run" / "summary.json").read_text())["evals"]
    assert e["eval/infra_failure_rate"] == 0.0  # training faults never reach the clean evaluation
    assert e["eval/slice/faults/infra_failure_rate"] > 0.0
    assert e["eval/slice/used_tool/episodes"] + e["eval/slice/no_tool/episodes"] == 16  # 8 tasks x 2 samples
    for k in ("tool_error", "tool_error_once", "tool_wrong", "faults"):
        assert 0.0 <= e[f"eval/slice/{k}/success"] <= 1.0
