"""`faults.tool_error`: a transient tool error the policy sees (the observation is replaced by the error and the
episode goes on), seeded, never an infrastructure failure; rate 0 changes nothing."""

import json
import random

import pytest

from tracerl.config.faults import FaultsConfig
from tracerl.contract import TerminalReason
from tracerl.envs import get_env
from tracerl.rollout.faults import TOOL_ERROR, wrap_spec


def _env(rate: float, **kw):
    spec = get_env("math_tool")
    task = spec.generate("train", 1, 0)[0]
    env = wrap_spec(spec, FaultsConfig(tool_error=rate, **kw)).make()
    env.reset(task, 0)
    return env, task


def test_rate_one_errors_every_call_and_the_episode_goes_on_to_the_envs_own_verdict():
    env, task = _env(1.0)
    for _ in range(2):  # two calls, two errors, no ending
        step = env.step("<code>print(12)</code>")
        assert step.observation == TOOL_ERROR and not step.terminated and step.terminal_reason is None
        assert step.info["fault"] == "tool_error" and step.info["tool_status"] == "tool_error"
    bad = env.step("no tags here")  # an invalid action is not a tool call: its observation is the env's own
    assert bad.observation != TOOL_ERROR and "fault" not in bad.info
    final = env.step(f"<answer>{task.answer}</answer>")  # answering is never replaced: the verdict is the env's
    assert final.terminated and final.terminal_reason == TerminalReason.EOS
    assert final.reward_components["correct"] == 1.0 and "fault" not in final.info


def test_rate_zero_is_the_unwrapped_env_and_other_faults_draw_as_before():
    spec = get_env("math_tool")
    assert wrap_spec(spec, FaultsConfig(tool_error=0.0)) is spec
    tasks = spec.generate("train", 20, 0)

    def kinds(cfg):  # the infra fault drawn on each task's first call
        out = []
        for t in tasks:
            env = wrap_spec(spec, cfg).make()
            env.reset(t, 1)
            out.append(env.step(f"<code>{t.metadata['program']}</code>").info.get("fault"))
        return out
    base = kinds(FaultsConfig(tool_crash=0.3, seed=5))
    with_errors = kinds(FaultsConfig(tool_crash=0.3, tool_error=0.5, seed=5))
    # the crash draws come from their own generator: same tasks crash; the others may now carry tool_error
    assert [k == "tool_crash" for k in base] == [k == "tool_crash" for k in with_errors]
    assert "tool_error" in with_errors


def test_draws_are_seeded_per_task_and_reset_seed():
    """At rate 0.3, call i of an episode errors exactly when the i-th draw of Random('seed:tool_error:task:reset')
    is below 0.3 (the draws a reader can replay by hand)."""
    spec = get_env("math_tool")
    task = spec.generate("train", 1, 0)[0]
    env = wrap_spec(spec, FaultsConfig(tool_error=0.3, seed=7)).make()
    env.reset(task, 3)
    got = [env.step("<code>print(1)</code>").observation == TOOL_ERROR for _ in range(2)]
    rng = random.Random(f"7:tool_error:{task.id}:3")
    assert got == [rng.random() < 0.3 for _ in range(2)]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_training_with_every_call_erroring_has_no_infra_failure(tmp_path, monkeypatch, mode):
    """`tracerl train smoke stages=[sft,rl] faults.tool_error=1.0`: every tool call of every RL episode is an
    error observation (tool/status_tool_error == tool/calls), no episode is an infrastructure failure, and the
    episodes that answered are rewarded by the env."""
    from tracerl.cli import main
    from tracerl.store import RunDir

    monkeypatch.chdir(tmp_path)
    rc = main(["train", "smoke", "stages=[sft,rl]", "rl.steps=1", "run.threads=1", "run.dir=run", "sft.epochs=2",
               f"rl.mode={mode}", "faults.tool_error=1.0"])
    assert rc == 0
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    [m] = [r for r in rows if r.get("stage") == "rl" and "tool/calls" in r]
    assert m["tool/calls"] > 0 and m["tool/status_tool_error"] == m["tool/calls"] and m["tool/error_rate"] == 1.0
    assert m["rollout/infra_failures"] == 0.0
    run = RunDir(tmp_path / "run")
    try:
        trajs = list(run.store.trajectories(stage="rl"))
    finally:
        run.close()
    calls = [s for t in trajs for s in t.spans if s.kind == "observation" and s.tool_name == "python"]
    assert calls and all(s.tool_status == "tool_error" for s in calls)
    assert all(t.terminal_reason != TerminalReason.INFRA_FAILURE for t in trajs)


def test_task_scope_draws_are_seeded_per_task_alone():
    """`tool_error_scope: task`: call i errors exactly when the i-th draw of Random('seed:tool_error:task') is below
    the rate, whatever the reset seed, so every episode of a task meets the same errors."""
    spec = get_env("math_tool")
    tasks = spec.generate("train", 12, 0)
    cfg = FaultsConfig(tool_error=0.5, tool_error_scope="task", seed=7)

    def pattern(task, reset_seed):
        env = wrap_spec(spec, cfg).make()
        env.reset(task, reset_seed)
        return [env.step("<code>print(1)</code>").observation == TOOL_ERROR for _ in range(2)]
    for t in tasks:
        rng = random.Random(f"7:tool_error:{t.id}")
        expected = [rng.random() < 0.5 for _ in range(2)]
        assert pattern(t, 3) == pattern(t, 11) == expected
    assert len({tuple(pattern(t, 0)) for t in tasks}) > 1  # the tasks do not all share one pattern


def test_task_scope_reaches_the_envs_a_run_plays_and_a_bad_scope_is_refused():
    """The recipe key reaches the training env (and the worker-process copy of the faults section); a scope
    that does not exist is one sentence, exit 2."""
    from tracerl.cli import main
    from tracerl.config import load_recipe
    from tracerl.run.envs import RunEnvs

    recipe = load_recipe("default", ["faults.tool_error=0.5", "faults.tool_error_scope=task"])
    env = RunEnvs.load(recipe).routes[0].spec.make()
    assert env.cfg.tool_error_scope == "task"
    assert FaultsConfig(**recipe.faults.model_dump()).tool_error_scope == "task"  # what RoutesRef ships to workers
    assert main(["config", "show", "default", "faults.tool_error_scope=group"]) == 2
