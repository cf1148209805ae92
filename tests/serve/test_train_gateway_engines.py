"""`tracerl train gateway_agent rollout.workers=2`: the trainer's gateway fronts two engine processes. With an
agent whose calls are seeded (tests/serve/seeded_agent.py) the run takes optimizer steps, each episode's calls
stay on one engine and the episodes spread over both; and (slow) it samples the same trajectories and ends at
the same weights as `rollout.workers=1`, where the trainer's own engine serves every call."""

import json
import sqlite3
from pathlib import Path

import pytest
from safetensors.torch import load_file

from tracerl.cli import main
from tracerl.config import load_recipe
from tracerl.run.envs import RunEnvs

AGENT = Path(__file__).resolve().parent / "seeded_agent.py"
OVERRIDES = ["rl.steps=2", "rl.prompts_per_step=2", "rl.group_size=4", "sft.demos=24", "sft.epochs=1",
             "env.train_tasks=40", "env.heldout_tasks=4", "gateway.concurrency=4", "rl.checkpoint_every=0",
             "stages=[sft,rl]", f"gateway.agent={AGENT}:run_episode"]


@pytest.fixture
def answers(tmp_path, monkeypatch):
    """The run's tasks (the recipe's own pool) as {prompt: answer}, where the seeded agent reads them."""
    envs = RunEnvs.load(load_recipe("gateway_agent", OVERRIDES))
    tasks = [t for p in envs.pools.values() for t in p.train] + [t for h in envs.heldout.values() for t in h]
    path = tmp_path / "answers.json"
    path.write_text(json.dumps({str(t.prompt): t.answer for t in tasks}))
    monkeypatch.setenv("TRACERL_TEST_ANSWERS", str(path))


def train(run: Path, workers: int) -> dict:
    assert main(["train", "gateway_agent", f"run.dir={run}", f"rollout.workers={workers}", *OVERRIDES]) == 0
    return json.loads((run / "gateway.json").read_text())


def rl_rows(run: Path) -> list[tuple]:
    with sqlite3.connect(run / "store.sqlite") as db:
        return sorted(db.execute("select step, group_id, token_ids, behavior_logprobs is not null, reward "
                                 "from trajectories where stage like 'rl%'").fetchall())


def test_train_gateway_agent_on_two_engines_takes_optimizer_steps(tmp_path, answers):
    run = tmp_path / "run"
    totals = train(run, 2)
    assert totals["episodes"] == 2 * 2 * 4 and totals["agent_errors"] == 0  # 2 steps x 2 tasks x 4 episodes
    assert len(totals["engine_calls"]) == 2 and min(totals["engine_calls"]) > 0 and totals["engine_deaths"] == 0
    rl = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if json.loads(x)["stage"] == "rl"]
    assert len(rl) == 2 and all(m["gateway/engines"] == 2.0 for m in rl)
    assert all(m.get("policy/updates", 0) > 0 for m in rl)  # the learner took optimizer steps, both steps
    calls = [r for r in map(json.loads, (run / "gateway_spans.jsonl").read_text().splitlines()) if r["record"] == "call"]
    by_episode: dict[str, set] = {}
    for c in calls:
        by_episode.setdefault(c["episode_id"], set()).add(c["engine"])
        assert c["policy_version"] >= 1 and c["completion_ids"] and len(c["logprobs"]) == len(c["completion_ids"])
    assert all(len(v) == 1 for v in by_episode.values())  # affinity
    assert set().union(*by_episode.values()) == {0, 1}  # spread
    assert {c["policy_version"] for c in calls} == {1, 2}  # after SFT (1), after RL step 1 (2): every engine synced


@pytest.mark.slow
def test_two_engines_sample_and_train_exactly_as_one(tmp_path, answers):
    one, two = tmp_path / "one", tmp_path / "two"
    train(one, 1)
    train(two, 2)
    assert rl_rows(one) == rl_rows(two) and len(rl_rows(one)) == 16
    w1, w2 = (load_file(r / "checkpoints" / "step_2" / "model.safetensors") for r in (one, two))
    assert w1.keys() == w2.keys() and all(w1[k].equal(w2[k]) for k in w1)
