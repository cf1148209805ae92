"""terminal and swe: disjoint splits, the expert's success rate, what the judges read (the file
system and a fresh re-run, never the transcript), and faults that are not the policy's."""

from __future__ import annotations

import random

import pytest

from tests.envs.conftest import play, success_rate
from tracerl.contract import TerminalReason
from tracerl.envs import get_env


@pytest.mark.parametrize("name", ["terminal", "swe"])
def test_splits_are_disjoint_and_generation_is_deterministic(name):
    spec = get_env(name)
    train, held = spec.generate("train", 40, 0), spec.generate("heldout", 10, 0)
    assert not {t.id for t in train} & {t.id for t in held}
    assert [t.id for t in spec.generate("train", 40, 0)] == [t.id for t in train]
    assert {round(t.difficulty * 2) for t in spec.generate("train", 30, 1)} == {0, 1, 2}


@pytest.mark.parametrize("name", ["terminal", "swe"])
def test_the_expert_succeeds_unless_it_errs(name):
    spec = get_env(name)
    tasks = spec.generate("train", 8, 3)
    assert success_rate(spec, tasks, 0, error_rate=0.0) == 1.0
    assert success_rate(spec, tasks, 0, error_rate=1.0) == 0.0


def test_terminal_state_persists_across_commands_and_output_is_judged_not_the_transcript():
    spec = get_env("terminal")
    task = spec.generate("train", 1, 5, difficulty=0.0)[0]
    script = task.metadata["script"]
    steps, env = play(spec, task, [f'<sh>echo "{script}" > solve.sh</sh>', "<sh>sh solve.sh</sh>", "<sh>cat out.txt</sh>",
                                   "<done>ok</done>"])
    assert [s.observation.startswith("<output>exit 0") for s in steps[:3]] == [True] * 3
    assert steps[-1].reward_components == {"success": 1.0, "visible": 1.0}
    assert env.files["out.txt"] == task.tests["expected"]
    # the same commands on a task whose hidden data differ from the visible: the script is re-run there
    assert all(h["expected"] != task.tests["expected"] for h in task.tests["hidden"])


def test_terminal_command_budget_and_invalid_limit():
    spec = get_env("terminal")
    task = spec.generate("train", 1, 5)[0]
    steps, _ = play(spec, task, ["<sh>true</sh>"] * 4 + ["<sh>true</sh>", "<sh>true</sh>"])
    assert "budget" in steps[4].observation and steps[-1].terminal_reason == TerminalReason.ENV_FAILURE
    assert steps[-1].reward_components["success"] == 0.0


class _Broken:
    def run(self, *a, **kw):
        raise OSError("sandbox worker died")


@pytest.mark.parametrize("name, action", [("terminal", "<sh>ls</sh>"), ("swe", "<test></test>")])
def test_a_sandbox_fault_is_an_infra_failure_never_a_reward(name, action):
    spec = get_env(name)
    task = spec.generate("train", 1, 0)[0]
    env = spec.make(sandbox=_Broken())
    env.reset(task, 0)
    step = env.step(action)
    assert step.terminated and step.terminal_reason == TerminalReason.INFRA_FAILURE and step.reward_components == {}


def test_swe_tools_list_read_search_edit_and_test():
    spec = get_env("swe")
    task = spec.generate("train", 1, 2, difficulty=1.0)[0]
    meta = task.metadata
    steps, env = play(spec, task, ["<ls></ls>", "<cat>calc.py</cat>", f"<grep>def {meta['buggy']}</grep>",
                                   "<test></test>", f"<edit>calc.py: {meta['bug_line']} => {meta['fix_line']}</edit>",
                                   "<test></test>", "<done>ok</done>"])
    obs = [s.observation for s in steps[:-1]]
    assert "README.md calc.py test_calc.py" in obs[0] and f"def {meta['buggy']}" in obs[1]
    assert obs[2].startswith(f"<output>calc.py:") and obs[3].startswith(f"<output>FAIL {meta['buggy']}")
    assert obs[4] == "<output>edited calc.py</output>\n" and obs[5].startswith("<output>all ")
    assert steps[-1].reward_components == {"success": 1.0, "tests": 1.0}
    assert meta["fix_line"] in env.files["calc.py"] and meta["files"]["calc.py"] != env.files["calc.py"]


def test_swe_hidden_tests_never_enter_the_repository():
    spec = get_env("swe")
    for task in spec.generate("train", 10, 4):
        visible = task.metadata["files"]["test_calc.py"]
        assert all(h["expr"] not in visible for h in task.tests["hidden"])
        assert "hidden" not in " ".join(task.metadata["files"])


def test_swe_bad_edits_are_invalid_actions():
    spec = get_env("swe")
    task = spec.generate("train", 1, 2)[0]
    steps, _ = play(spec, task, ["<edit>calc.py: no such text => x</edit>", "<edit>nofile.py: a => b</edit>"])
    assert steps[0].info["invalid_action"] and steps[-1].terminal_reason == TerminalReason.ENV_FAILURE
