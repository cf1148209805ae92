"""A hung tool costs its episode, not the step: every env step has a per-call deadline by default
(`env.step_timeout_s`, 30 s), and a step past it ends only its episode, as `infra_failure` (an
infrastructure fault: no reward, out of the loss), while the other episodes of the step finish normally.
On the main of 2026-12-05 the default had no deadline, and one hung tool held the whole sync step."""

import dataclasses
import time

from tracerl.config import load_recipe
from tracerl.config.faults import FaultsConfig
from tracerl.contract import TerminalReason
from tracerl.envs import get_env
from tracerl.envs.math_tool.env import MathToolEnv
from tracerl.rollout import LoopBudgets, run_episodes
from tracerl.rollout.faults import wrap_spec

from tests.rollout.test_agent_loop import SAMPLING, EchoSandbox, ScriptedEngine

HANG_S = 60.0  # the injected hang: far past the deadline, so only the deadline can end the step in time
DEADLINE_S = 1.0


def test_the_default_recipe_gives_every_tool_call_a_deadline():
    recipe = load_recipe("default")
    assert recipe.env.step_timeout_s == 30.0
    assert LoopBudgets.from_env(recipe.env).step_timeout_s == 30.0 and LoopBudgets().step_timeout_s == 30.0


def test_a_step_with_one_hung_tool_finishes_within_the_deadline_and_the_others_complete(tiny):
    model, tok = tiny
    base = dataclasses.replace(get_env("math_tool"), make=lambda: MathToolEnv(sandbox=EchoSandbox()))
    # fault draws are seeded by task id and reset seed: with this rate some episodes hang and most do not
    spec = wrap_spec(base, FaultsConfig(tool_hang=0.2, hang_s=HANG_S))
    tasks = get_env("math_tool").generate("train", 12, 0)
    engine = ScriptedEngine(model, tok, ["<code>print(6*7)</code>"])  # one tool call per turn, every episode
    t0 = time.monotonic()
    trajs = run_episodes(engine, spec, tasks, ["g"] * len(tasks), sampling=SAMPLING, policy_version=0, seed=0,
                         budgets=LoopBudgets(max_turns=1, max_tokens=256, step_timeout_s=DEADLINE_S))
    wall = time.monotonic() - t0
    hung = [t for t in trajs if t.terminal_reason == TerminalReason.INFRA_FAILURE]
    normal = [t for t in trajs if t.terminal_reason != TerminalReason.INFRA_FAILURE]
    assert 1 <= len(hung) < len(trajs) // 2, [t.terminal_reason for t in trajs]
    # one turn: every hung call waits out the same deadline at once; without it the step would take HANG_S
    assert wall < DEADLINE_S + 5.0, wall
    for t in hung:
        assert "exceeded 1.0 s" in t.verifier_output["infra"] and t.reward == 0.0 and not t.trainable
    for t in normal:  # their tool ran and they ended by the loop's own budget, with the tool's output seen
        assert t.terminal_reason == TerminalReason.MAX_TURNS
        assert "42" in tok.decode(t.token_ids[len(t.token_ids) // 2:])
