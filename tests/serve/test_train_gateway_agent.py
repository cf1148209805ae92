"""`tracerl train gateway_agent` at the smallest size: the server starts in-process, the example agent
runs against it for RL and both held-out evaluations, and the run records what the gateway did."""

import json
import sqlite3

from tracerl.cli import main


def test_train_gateway_agent_end_to_end(tmp_path, capsys):
    run = tmp_path / "run"
    rc = main(["train", "gateway_agent", f"run.dir={run}", "rl.steps=1", "rl.prompts_per_step=2", "rl.group_size=2",
               "sft.demos=24", "sft.epochs=1", "eval.tasks=2", "eval.samples=1", "eval.k=[1]", "env.train_tasks=40",
               "env.heldout_tasks=4", "gateway.concurrency=2", "rl.checkpoint_every=0"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "gateway: {" in out
    totals = json.loads((run / "gateway.json").read_text())
    assert totals["episodes"] == 2 * 1 + 2 * 2 + 2 * 1 and totals["agent_errors"] == 0  # eval, rl, eval
    log = [json.loads(x) for x in (run / "gateway_spans.jsonl").read_text().splitlines()]
    assert sum(r["record"] == "episode_end" for r in log) == totals["episodes"]
    with sqlite3.connect(run / "store.sqlite") as db:
        stages = dict(db.execute("select stage, count(*) from trajectories group by stage").fetchall())
    assert stages.get("rl", 0) + stages.get("rl_filtered", 0) == 4  # 2 tasks x 2 episodes, none split
    assert sum(v for k, v in stages.items() if k.startswith("eval")) == 4  # 2 held-out tasks, before and after
