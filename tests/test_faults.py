"""Fault injection: each kind ends its episode as infra_failure, labelled by kind, reproducibly;
never rewarded and never a demonstration."""

import pytest

from tracerl.contract import TerminalReason
from tracerl.envs import get_env
from tracerl.config.faults import KINDS, FaultsConfig
from tracerl.rollout.faults import count_faults, wrap_spec
from tracerl.train.demos import collect_demos


class Boom:
    name, revision = "boom", "1"

    def reset(self, task, seed):
        return []

    def step(self, text):
        raise ZeroDivisionError("a bug in the environment")

    def state_hash(self):
        return ""


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_at_rate_one_is_an_infra_failure_labelled_by_kind(kind):
    spec = get_env("math_tool")
    env = wrap_spec(spec, FaultsConfig(**{kind: 1.0}, hang_s=0.01)).make()
    task = spec.generate("train", 1, 0)[0]
    env.reset(task, 0)
    action = "<answer>1</answer>" if kind == "verifier_error" else "<code>print(1)</code>"
    step = env.step(action)
    assert step.terminated and step.terminal_reason == TerminalReason.INFRA_FAILURE
    assert step.info["fault"] == kind and step.reward_components == {}


def test_a_real_environment_exception_is_labelled_not_raised():
    from tracerl.rollout.faults import FaultyEnv
    env = FaultyEnv(Boom(), FaultsConfig(slow_call=0.0, tool_crash=0.0))
    env.reset(None, 0)
    step = env.step("x")
    assert step.terminal_reason == TerminalReason.INFRA_FAILURE and step.info["fault"] == "env_exception"
    assert "ZeroDivisionError" in step.info["error"]


def test_no_faults_leaves_the_spec_alone_and_draws_are_reproducible():
    spec = get_env("math_tool")
    assert wrap_spec(spec, FaultsConfig()) is spec
    cfg = FaultsConfig(tool_crash=0.3, garbage_output=0.3, seed=5)
    tasks = spec.generate("train", 20, 0)

    def outcomes():
        out = []
        for t in tasks:
            env = wrap_spec(spec, cfg).make()
            env.reset(t, 1)
            out.append(env.step(f"<code>{t.metadata['program']}</code>").info.get("fault"))
        return out

    first = outcomes()
    assert first == outcomes()
    # 20 draws at 0.3 + 0.3: both kinds and clean steps all occur
    assert {"tool_crash", "garbage_output", None} <= set(first)


def test_faulted_expert_episodes_are_never_demonstrations():
    spec = wrap_spec(get_env("math_tool"), FaultsConfig(tool_crash=0.5, seed=1))
    tasks = get_env("math_tool").generate("train", 40, 0)
    clean = collect_demos(get_env("math_tool"), tasks, seed=0, max_turns=3)
    faulty = collect_demos(spec, tasks, seed=0, max_turns=3)
    assert len(clean) == 40 and 0 < len(faulty) < 40
    assert all(d.turns and d.turns[-1][1] is None for d in faulty)  # each ended on its own


def test_count_faults_reads_the_kind_from_verifier_output():
    from tracerl.contract import Trajectory

    def traj(reason, fault=None):
        t = Trajectory(trajectory_id="x", group_id="g", task_id="k", env_name="e")
        t.terminal_reason, t.verifier_output = reason, ({"fault": fault} if fault else {})
        return t

    trajs = [traj(TerminalReason.INFRA_FAILURE, "tool_hang"), traj(TerminalReason.INFRA_FAILURE, "tool_hang"),
             traj(TerminalReason.INFRA_FAILURE), traj(TerminalReason.EOS)]
    assert count_faults(trajs) == {"tool_hang": 2, "unlabelled": 1}


def test_the_recipe_section_is_validated():
    from tracerl.config import load_recipe
    from tracerl.errors import UserError
    assert load_recipe("smoke", ["faults.tool_crash=0.1"]).faults.tool_crash == 0.1
    with pytest.raises(UserError, match="faults.tool_crash"):
        load_recipe("smoke", ["faults.tool_crash=2"])
    with pytest.raises(UserError, match="faults"):
        load_recipe("smoke", ["faults.tool_crsh=0.1"])


def test_training_survives_engine_errors_and_retries_keep_lineage(tmp_path, monkeypatch):
    """A smoke run with a third of generate rows failing completes; every infra episode is labelled
    and unrewarded, and an episode that was retried names the attempt it replaced."""
    from tracerl.cli import main
    from tracerl.store import RunDir

    monkeypatch.chdir(tmp_path)
    rc = main(["train", "smoke", "stages=[sft,rl]", "rl.steps=1", "run.threads=1", "run.dir=run", "sft.epochs=2",
               "faults.engine_error=0.3", "env.infra_retries=1"])
    assert rc == 0
    run = RunDir(tmp_path / "run")
    try:
        trajs = list(run.store.trajectories(stage="rl"))
    finally:
        run.close()
    infra = [t for t in trajs if t.terminal_reason == TerminalReason.INFRA_FAILURE]
    retried = [t for t in trajs if t.attempt > 0]
    assert retried and all(len(t.retry_lineage) == t.attempt and "engine_error" in t.retry_lineage[0] for t in retried)
    assert all(t.reward == 0.0 and t.verifier_output.get("fault") == "engine_error" for t in infra)
