"""The agent loop keeps roles honest: observations and template tokens are never actions, action
ids are exactly what the engine sampled, and budgets end episodes with the right reason."""

import dataclasses
import types

from tracerl.contract import TerminalReason, TokenRole, validate
from tracerl.envs import get_env
from tracerl.envs.math_tool.env import MathToolEnv
from tracerl.rollout import LoopBudgets, TorchEngine, run_episodes
from tracerl.rollout.engine import Sample
from tracerl.rollout.render import render_prompt

SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0}


class ScriptedEngine(TorchEngine):
    """Plays fixed action texts (as token ids it 'sampled') and records every sample it returned."""

    def __init__(self, model, tok, script):
        super().__init__(model, tok)
        self.script, self.turn, self.returned = script, 0, []

    def generate(self, prompts, **kw):
        text = self.script[min(self.turn, len(self.script) - 1)]
        self.turn += 1
        out = []
        for _ in prompts:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            s = Sample(list(ids), [-0.5] * len(ids), "stop" if text.endswith(">") else "length")
            self.returned.append(list(ids))
            out.append(s)
        return out


class EchoSandbox:
    """Runs the (trusted, generated) program in-process, only for these role tests."""

    def run(self, code, limits=None):
        import contextlib
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(code, {})
        return types.SimpleNamespace(status="ok", stdout=buf.getvalue(), stderr="", wall_s=0.001)


class BrokenSandbox:
    def run(self, code, limits=None):
        raise OSError("sandbox worker died")


def _spec(sandbox):
    return dataclasses.replace(get_env("math_tool"), make=lambda: MathToolEnv(sandbox=sandbox))


def test_roles_and_no_retokenization(tiny):
    model, tok = tiny
    spec = _spec(EchoSandbox())
    task = spec.generate("train", 1, 0)[0]
    script = [f"<code>{task.metadata['program']}</code>", f"<answer>{task.answer}</answer>"]
    engine = ScriptedEngine(model, tok, script)
    (traj,) = run_episodes(engine, spec, [task], ["g"], budgets=LoopBudgets(), sampling=SAMPLING,
                           policy_version=7, seed=0)
    validate(traj)
    assert traj.terminal_reason == TerminalReason.EOS and traj.reward == 1.0
    obs = [s for s in traj.spans if s.kind == "observation"]
    assert len(obs) == 1 and obs[0].tool_status == "ok"
    for s in obs:
        assert all(traj.roles[i] == TokenRole.OBSERVATION for i in range(s.start, s.end))
    # template tokens (chat headers) exist and none is an action
    assert TokenRole.TEMPLATE in traj.roles
    # the action tokens, in order, are exactly the concatenation of what the engine returned
    actions = [traj.token_ids[i] for i, r in enumerate(traj.roles) if r == TokenRole.ACTION]
    assert actions == [t for ids in engine.returned for t in ids]
    # every action token carries the sampling version; nothing else does
    assert {v for v, r in zip(traj.policy_versions, traj.roles) if r == TokenRole.ACTION} == {7}
    assert {v for v, r in zip(traj.policy_versions, traj.roles) if r != TokenRole.ACTION} == {-1}


def test_observation_is_tokenized_on_its_own(tiny):
    model, tok = tiny
    spec = _spec(EchoSandbox())
    task = spec.generate("train", 1, 0)[0]
    engine = ScriptedEngine(model, tok, [f"<code>{task.metadata['program']}</code>", "<answer>0</answer>"])
    (traj,) = run_episodes(engine, spec, [task], ["g"], budgets=LoopBudgets(), sampling=SAMPLING,
                           policy_version=0, seed=0)
    (obs,) = [s for s in traj.spans if s.kind == "observation"]
    expected = tok(f"<output>{task.answer}</output>", add_special_tokens=False)["input_ids"]
    assert traj.token_ids[obs.start:obs.end] == expected
    assert traj.reward == 0.0 and traj.reward_components == {"correct": 0.0, "format": 1.0}


def test_max_turns_truncates(tiny):
    model, tok = tiny
    spec = _spec(EchoSandbox())
    task = spec.generate("train", 1, 0)[0]
    engine = ScriptedEngine(model, tok, ["<code>print(1)</code>"])
    (traj,) = run_episodes(engine, spec, [task], ["g"], budgets=LoopBudgets(max_turns=2), sampling=SAMPLING,
                           policy_version=0, seed=0)
    assert traj.terminal_reason == TerminalReason.MAX_TURNS and traj.truncated and traj.reward == 0.0


def test_max_tokens_truncates(tiny):
    model, tok = tiny
    spec = _spec(EchoSandbox())
    task = spec.generate("train", 1, 0)[0]
    prompt_len = len(render_prompt(tok, MathToolEnv().reset(task, 0))[0])
    budget = prompt_len + 20
    # a policy that never closes its tag rambles until the episode's token budget
    engine = ScriptedEngine(model, tok, ["print(1) " * 40])
    (traj,) = run_episodes(engine, spec, [task], ["g"], budgets=LoopBudgets(max_tokens=budget, max_new_tokens=200,
                           max_turns=50), sampling=SAMPLING, policy_version=0, seed=0)
    assert traj.terminal_reason == TerminalReason.MAX_TOKENS and traj.truncated
    assert traj.reward == 0.0


def test_observation_past_the_budget_truncates(tiny):
    model, tok = tiny
    spec = _spec(EchoSandbox())
    task = spec.generate("train", 1, 0)[0]
    prompt_len = len(render_prompt(tok, MathToolEnv().reset(task, 0))[0])
    action = "<code>print(1)</code>"
    budget = prompt_len + len(tok(action, add_special_tokens=False)["input_ids"]) + 2  # obs needs > 2
    engine = ScriptedEngine(model, tok, [action])
    (traj,) = run_episodes(engine, spec, [task], ["g"], budgets=LoopBudgets(max_tokens=budget), sampling=SAMPLING,
                           policy_version=0, seed=0)
    assert traj.terminal_reason == TerminalReason.MAX_TOKENS and len(traj) <= budget


def test_invalid_action_is_an_observation_not_an_error(tiny):
    model, tok = tiny
    spec = _spec(EchoSandbox())
    task = spec.generate("train", 1, 0)[0]
    engine = ScriptedEngine(model, tok, ["<search>x</search>", f"<answer>{task.answer}</answer>"])
    (traj,) = run_episodes(engine, spec, [task], ["g"], budgets=LoopBudgets(), sampling=SAMPLING,
                           policy_version=0, seed=0)
    (obs,) = [s for s in traj.spans if s.kind == "observation"]
    assert obs.tool_status == "invalid_action"
    assert traj.reward == 1.0


def test_sandbox_fault_is_infra_failure_without_reward(tiny):
    model, tok = tiny
    spec = _spec(BrokenSandbox())
    task = spec.generate("train", 1, 0)[0]
    engine = ScriptedEngine(model, tok, ["<code>print(1)</code>"])
    (traj,) = run_episodes(engine, spec, [task], ["g"], budgets=LoopBudgets(), sampling=SAMPLING,
                           policy_version=0, seed=0)
    assert traj.terminal_reason == TerminalReason.INFRA_FAILURE
    assert traj.reward == 0.0 and not traj.trainable
