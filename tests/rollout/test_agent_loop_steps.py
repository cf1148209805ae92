"""A turn's environment steps run at once and come back in episode order; a hung step is an
infra failure of its own episode only; an action ending with EOS ends the episode as EOS even when
the observation would not fit."""

import dataclasses
import threading

from tracerl.contract import TerminalReason, TokenRole
from tracerl.envs import get_env
from tracerl.envs.base import Step
from tracerl.envs.math_tool.env import MathToolEnv
from tracerl.rollout import LoopBudgets, run_episodes
from tracerl.rollout.render import render_prompt

from .test_agent_loop import SAMPLING, EchoSandbox, ScriptedEngine


class _Env:
    """Answers its step with `obs<i>` after `gate(i)`; `i` is the task id's number."""

    name, revision = "probe", "0"

    def __init__(self, gate):
        self.gate, self.i = gate, None

    def reset(self, task, seed):
        self.i = int(task.id.split("-")[-1]) if "-" in task.id else 0
        return [{"role": "user", "content": task.prompt}]

    def step(self, action_text):
        self.gate(self.i)
        return Step(observation=f"obs{self.i}", info={"tool": "probe", "tool_status": "ok"})

    def state_hash(self):
        return "s"


def _spec(gate):
    base = get_env("math_tool")
    return dataclasses.replace(base, name="probe", make=lambda: _Env(gate))


def _tasks(n):
    base = get_env("math_tool").generate("train", 1, 0)[0]
    return [dataclasses.replace(base, id=f"t-{i}") for i in range(n)]


def _observations(tok, traj):
    return [tok.decode(traj.token_ids[s.start:s.end]) for s in traj.spans if s.kind == "observation"]


def test_a_turns_steps_run_at_once_and_come_back_in_order(tiny):
    model, tok = tiny
    barrier = threading.Barrier(6, timeout=10)  # broken unless all six steps are in flight together
    spec = _spec(lambda i: barrier.wait())
    engine = ScriptedEngine(model, tok, ["<code>print(1)</code>"])
    trajs = run_episodes(engine, spec, _tasks(6), ["g"] * 6, budgets=LoopBudgets(max_turns=2), sampling=SAMPLING,
                         policy_version=0, seed=0)
    assert [_observations(tok, t) for t in trajs] == [[f"obs{i}"] * 2 for i in range(6)]  # two turns each
    assert all(t.terminal_reason == TerminalReason.MAX_TURNS for t in trajs)


def test_a_hung_step_is_an_infra_failure_of_its_episode_only(tiny):
    model, tok = tiny
    release = threading.Event()
    spec = _spec(lambda i: release.wait(30) if i == 2 else None)
    engine = ScriptedEngine(model, tok, ["<code>print(1)</code>"])
    try:
        trajs = run_episodes(engine, spec, _tasks(4), ["g"] * 4, sampling=SAMPLING, policy_version=0, seed=0,
                             budgets=LoopBudgets(max_turns=2, step_timeout_s=0.5))
    finally:
        release.set()
    reasons = [t.terminal_reason for t in trajs]
    assert reasons == [TerminalReason.MAX_TURNS, TerminalReason.MAX_TURNS, TerminalReason.INFRA_FAILURE,
                       TerminalReason.MAX_TURNS]
    assert not trajs[2].trainable and trajs[2].reward == 0.0 and "exceeded" in trajs[2].verifier_output["infra"]
    assert _observations(tok, trajs[2]) == [] and _observations(tok, trajs[3]) == ["obs3"] * 2


def test_eos_is_recognised_before_the_observation_room_check(tiny):
    model, tok = tiny
    spec = dataclasses.replace(get_env("math_tool"), make=lambda: MathToolEnv(sandbox=EchoSandbox()))
    task = spec.generate("train", 1, 0)[0]
    prompt_len = len(render_prompt(tok, MathToolEnv().reset(task, 0))[0])
    action = "I am done" + tok.eos_token  # no answer tag: the env answers with an invalid-action note
    n_action = len(tok(action, add_special_tokens=False)["input_ids"])
    assert tok(action, add_special_tokens=False)["input_ids"][-1] == tok.eos_token_id
    engine = ScriptedEngine(model, tok, [action])
    (traj,) = run_episodes(engine, spec, [task], ["g"], budgets=LoopBudgets(max_tokens=prompt_len + n_action + 2),
                           sampling=SAMPLING, policy_version=0, seed=0)
    assert traj.terminal_reason == TerminalReason.EOS and not traj.truncated
    assert TokenRole.OBSERVATION not in traj.roles and len(traj) == prompt_len + n_action
