"""math_tool's scripted expert recovers from failed calls: `error_rate` makes its first call slip (a
SyntaxError, run in the real sandbox), it calls again once after any failed call, and error_rate 0 writes
exactly the demonstrations it wrote before the option existed (same rng stream, same turns)."""

from __future__ import annotations

import random

from tracerl.envs.base import get_env
from tracerl.envs.math_tool.env import slipped
from tracerl.envs.math_tool.generator import generate
from tracerl.envs.math_tool.native import native_spec
from tracerl.rollout.faults import TOOL_ERROR
from tracerl.train.demos import collect_demos


def _tasks(n=40):
    return generate("train", n, seed=3, difficulty=(0.0, 0.5))


def test_slipped_program_is_a_syntax_error():
    assert slipped("x=3;x+=4;print(x)") == "x=3;x+=4;print(x"
    assert slipped("x=1") == "x=1)"


def test_error_rate_zero_matches_the_old_expert_turn_for_turn():
    spec = get_env("math_tool")
    tasks = _tasks()
    old = collect_demos(spec, tasks, seed=0, max_turns=3, expert_kwargs={"tool_rate": 0.5})
    new = collect_demos(spec, tasks, seed=0, max_turns=3, expert_kwargs={"tool_rate": 0.5, "error_rate": 0.0})
    assert [d.turns for d in old] == [d.turns for d in new]
    # the old rule by hand: one draw per task from the shared rng; a tool episode is code -> output -> answer
    rng = random.Random("demos:0")
    for d in old:
        uses_tool = random.Random(f"{d.task.id}:{rng.random()}").random() < 0.5
        if uses_tool:
            assert [a for a, _ in d.turns] == [f"<code>{d.task.metadata['program']}</code>", f"<answer>{d.task.answer}</answer>"]
            assert d.turns[0][1] == f"<output>{d.task.answer}</output>"
        else:
            assert [a for a, _ in d.turns] == [f"<answer>{d.task.answer}</answer>"]
        assert d.reward > 0


def test_every_tool_episode_slips_then_retries_and_answers_right():
    spec = get_env("math_tool")
    demos = collect_demos(spec, _tasks(12), seed=0, max_turns=3, expert_kwargs={"tool_rate": 1.0, "error_rate": 1.0})
    assert len(demos) == 12
    for d in demos:
        prog = d.task.metadata["program"]
        (a1, o1), (a2, o2), (a3, o3) = d.turns
        assert a1 == f"<code>{slipped(prog)}</code>" and "SyntaxError" in o1  # the sandbox ran the slip
        assert a2 == f"<code>{prog}</code>" and o2 == f"<output>{d.task.answer}</output>"
        assert a3 == f"<answer>{d.task.answer}</answer>" and o3 is None and d.reward > 0


def test_a_tool_that_errs_is_retried_once_then_answered_in_the_head():
    spec = get_env("math_tool")
    task = _tasks(1)[0]
    rng = random.Random(0)
    from tracerl.envs.math_tool.env import expert

    assert expert(task, [TOOL_ERROR], rng, tool_rate=1.0) == f"<code>{task.metadata['program']}</code>"
    assert expert(task, [TOOL_ERROR, TOOL_ERROR], rng, tool_rate=1.0) == f"<answer>{task.answer}</answer>"
    assert expert(task, ["<output>7</output>"], rng) == "<answer>7</answer>"
    assert spec.expert is expert


def test_native_expert_retries_with_a_json_call():
    spec = native_spec(get_env("math_tool"), "hermes")
    demos = collect_demos(spec, _tasks(6), seed=0, max_turns=3, expert_kwargs={"tool_rate": 1.0, "error_rate": 1.0})
    assert len(demos) == 6
    for d in demos:
        (a1, o1), (a2, o2), (a3, _) = d.turns
        assert "<tool_call>" in a1 and "print(x\"" in a1 and "SyntaxError" in o1
        assert "<tool_call>" in a2 and "print(x)" in a2 and o2.strip() == d.task.answer
        assert a3 == d.task.answer and d.reward > 0
