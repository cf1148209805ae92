"""`tracerl inspect` output captured: roles coloured, log-probs on demand, filters, no-tokenizer fallback."""

import importlib.util
import shutil
from pathlib import Path

import pytest

from tracerl.cli import main
from tracerl.store import RunDir

_spec = importlib.util.spec_from_file_location("report_screenshot", Path(__file__).parents[2] / "benchmarks" / "report_screenshot.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.fixture(scope="module")
def run_path(tmp_path_factory):
    return bench.synthetic_run(tmp_path_factory.mktemp("run"), steps=2)


def test_latest_step_decoded_with_reward_and_ending(run_path, capsys):
    assert main(["inspect", str(run_path), "--color", "never", "--limit", "0"]) == 0
    out = capsys.readouterr().out
    assert "step 2, stage rl: showing 16 of 16 matching (16 stored)" in out  # rl steps 1..2
    assert "What is" in out and "<answer>" in out  # decoded prompt and action text
    assert "reward 1.1 (correct=1×1, format=1×0.1)" in out and "ending eos" in out
    assert "\x1b[" not in out and "⟨" not in out  # no colour codes when asked, no log-probs unless asked
    # without colour, roles are told apart by text markers at each change of role
    assert "⟦template⟧<|im_start|>" in out and "⟦prompt⟧What is" in out and "⟦action⟧" in out


def test_roles_coloured_and_logprobs(run_path, capsys):
    with RunDir(run_path).store as store:
        traj = next(t for t in store.trajectories(stage="rl", step=1) if any(s.tool_status for s in t.spans))
    assert main(["inspect", str(run_path), "--trajectory", traj.trajectory_id, "--logprobs", "--color", "always"]) == 0
    out = capsys.readouterr().out
    assert traj.trajectory_id in out
    assert "\x1b[36mWhat is" in out  # prompt text in cyan
    assert "\x1b[35m<|im_start|>" in out  # template header in magenta
    assert "\x1b[1;32m" in out and "\x1b[33m<output>" in out  # action bold green, observation yellow
    first_lp = next(lp for lp in traj.behavior_logprobs if lp == lp)
    k = traj.behavior_logprobs.index(first_lp)
    assert f"⟨{first_lp:.2f} v{traj.policy_versions[k]}" in out  # log-prob and the policy version that sampled it
    assert "⟦" not in out  # colour on: no text markers
    assert "tool python" in out


def test_filters_and_token_ids_without_tokenizer(run_path, tmp_path, capsys):
    assert main(["inspect", str(run_path), "--step", "1", "--tool-errors", "--color", "never", "--limit", "0"]) == 0
    out = capsys.readouterr().out
    shown = out.count("╭─")
    assert shown == out.count("status error") > 0  # only episodes with a failed tool call
    bare = tmp_path / "bare"
    shutil.copytree(run_path, bare, ignore=shutil.ignore_patterns("tokenizer", "report"))
    assert main(["inspect", str(bare), "--step", "1", "--limit", "1", "--color", "never"]) == 0
    out = capsys.readouterr().out
    assert "no tokenizer found, showing token ids" in out and "[" in out
    assert main(["inspect", str(bare), "--trajectory", "nope"]) == 2
    assert "no trajectory 'nope'" in capsys.readouterr().err
