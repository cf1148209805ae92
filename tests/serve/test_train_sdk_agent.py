"""An OpenAI Agents SDK agent (its default model class, the Responses API, `Runner.run_streamed`) trains for
two RL steps through `gateway.agent`: `tracerl train gateway_agent gateway.agent=examples/gateway_agent/sdk_agent.py:run_episode`."""

import json
import sqlite3

import pytest

from tracerl.cli import main

pytest.importorskip("agents")


def test_train_an_agents_sdk_agent_for_two_steps(tmp_path, capsys):
    run = tmp_path / "run"
    rc = main(["train", "gateway_agent", f"run.dir={run}", "gateway.agent=examples/gateway_agent/sdk_agent.py:run_episode",
               "rl.steps=2", "rl.prompts_per_step=2", "rl.group_size=2", "sft.demos=24", "sft.epochs=1", "eval.tasks=2",
               "eval.samples=1", "eval.k=[1]", "env.train_tasks=40", "env.heldout_tasks=4", "gateway.concurrency=2",
               "rl.checkpoint_every=0"])
    assert rc == 0
    totals = json.loads((run / "gateway.json").read_text())
    assert totals["episodes"] == 2 + 2 * 2 * 2 + 2 and totals["agent_errors"] == 0  # eval, 2 rl steps, eval
    log = [json.loads(x) for x in (run / "gateway_spans.jsonl").read_text().splitlines()]
    calls = [r for r in log if r["record"] == "call"]
    assert calls and all(c["completion_ids"] and len(c["logprobs"]) == len(c["completion_ids"]) for c in calls)
    with sqlite3.connect(run / "store.sqlite") as db:
        stages = dict(db.execute("select stage, count(*) from trajectories group by stage").fetchall())
    assert stages.get("rl", 0) + stages.get("rl_filtered", 0) >= 8  # 2 steps x 2 tasks x 2 episodes
