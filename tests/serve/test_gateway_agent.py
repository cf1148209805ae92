"""The example agent (openai client only) and the gateway rollout that trains it."""

import ast
import importlib.util
import json
from pathlib import Path

import torch

from tracerl.envs.calc_json import TOOLS, calculator
from tracerl.rollout.agent_loop import LoopBudgets
from tracerl.config.gateway import GatewayConfig
from tracerl.serve.rollout import GatewayRollout
from tracerl.rollout import TorchEngine

AGENT = Path(__file__).resolve().parents[2] / "examples" / "gateway_agent" / "agent.py"


def _agent_module():
    spec = importlib.util.spec_from_file_location("gateway_agent_example", AGENT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_agent_imports_no_tracerl_and_offers_the_envs_tool(tiny):
    tree = ast.parse(AGENT.read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert "tracerl" not in imported and "openai" in imported
    agent = _agent_module()
    assert json.dumps(agent.TOOLS) == json.dumps(TOOLS)  # same schema, so the same rendered system message
    _, tasks, _, _ = tiny
    for t in tasks:
        assert agent.calculator(t.metadata["expression"]) == calculator(t.metadata["expression"]) == t.answer
    assert agent.calculator("1/0").startswith("error") and agent.calculator("__import__('os')").startswith("error")


def test_gateway_rollout_returns_validated_grouped_trajectories(tiny, tmp_path):
    spec, tasks, model, tok = tiny
    roll = GatewayRollout(GatewayConfig(agent=f"{AGENT}:run_episode", concurrency=4), span_log=tmp_path / "spans.jsonl")
    try:
        entropy = {}
        trajs = roll(TorchEngine(model, tok), spec, tasks[:2] * 2, ["g0", "g1", "g0", "g1"],
                     budgets=LoopBudgets(max_turns=3, max_tokens=500, max_new_tokens=6),
                     sampling={"temperature": 1.0, "top_p": 1.0, "top_k": 0}, policy_version=4, seed=1,
                     generator=torch.Generator().manual_seed(0), entropy_out=entropy)
    finally:
        roll.close()
    assert sorted(t.group_id for t in trajs if t.verifier_output["segment"] == 0) == ["g0", "g0", "g1", "g1"]
    assert all(set(t.policy_versions) <= {-1, 4} and t.terminal_reason is not None for t in trajs)
    assert all(len(entropy[t.trajectory_id]) == t.num_action_tokens for t in trajs)
    assert roll.totals["episodes"] == 4 and roll.totals["agent_errors"] == 0
    assert {t.task_id for t in trajs} == {tasks[0].id, tasks[1].id}
