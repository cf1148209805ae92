"""A `reward:` recipe trains under rl.mode: async (spawned worker processes) and run.backend: ray (a Ray actor):
the workers import the functions the driver resolved, call them there (a sync and an async function, each
call under `reward.timeout_s`), and the components land in the store as in a sync run."""

from __future__ import annotations

import json
import os

import pytest

import tracerl
from tracerl.contract.roles import TerminalReason

REWARDS = '''
import asyncio, os, time

LOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.log")


def _note(name):
    with open(LOG, "a") as f:
        f.write(f"{name} {os.getpid()}\\n")


def correct(completions, answer, **kwargs):
    _note("correct")
    return [float(c.strip() == str(a)) for c, a in zip(completions, answer)]


async def short(prompts, completions, **kwargs):
    _note("short")
    if "slow" in prompts[0]:
        await asyncio.sleep(5)  # past reward.timeout_s: the episode is an infra_failure, never a 0
    await asyncio.sleep(0)
    return [1.0 / (1 + len(c)) for c in completions]
'''

ROWS = [{"id": "a", "prompt": "1+1=", "answer": "2"}, {"id": "b", "prompt": "2+2=", "answer": "4"},
        {"id": "c", "prompt": "3+3=", "answer": "6"}, {"id": "s", "prompt": "slow 1+2=", "answer": "3"}]


def _folder(tmp_path, monkeypatch):
    (tmp_path / "wrewards.py").write_text(REWARDS)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps({**r, "split": "train"}) + "\n" for r in ROWS))
    recipe = {
        "run": {"seed": 0, "progress": False, "threads": 1},
        "model": {"tiny": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64,
                           "vocab_size": 320, "individual_digits": True}},
        "tasks": {"sources": [{"path": "rows.jsonl", "license": "MIT"}]},
        "reward": {"funcs": ["wrewards:correct", "wrewards:short"], "weights": [1.0, 0.5], "timeout_s": 0.5,
                   "stop_strings": ["\n"]},
        "env": {"max_turns": 1, "max_tokens": 32, "max_new_tokens": 4},
        "rl": {"steps": 2, "prompts_per_step": 4, "group_size": 2, "eval_every": 0, "checkpoint_every": 0},
        "stages": ["rl"]}
    (tmp_path / "recipe.yaml").write_text(json.dumps(recipe))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _check(tmp_path, run, in_workers=True):
    from tracerl.store import Store

    store = Store(run.run_dir / "store.sqlite")
    per_step = [list(store.trajectories(stage="rl", step=s)) for s in (1, 2)]
    assert [len(x) for x in per_step] == [4 * 2, 4 * 2]  # prompts_per_step x group_size at steps 1 and 2
    trajs = per_step[0] + per_step[1]
    infra = [t for t in trajs if t.terminal_reason == TerminalReason.INFRA_FAILURE]
    scored = [t for t in trajs if t.terminal_reason != TerminalReason.INFRA_FAILURE]
    # the three quick rows are scored in the worker: reward = 1.0 * correct + 0.5 * short, short = 1 / (1 + len(c))
    assert len(scored) == 2 * 2 * 3 and {t.task_id for t in scored} == {"a", "b", "c"}
    for t in scored:
        c = t.reward_components
        assert set(c) == {"correct", "short"} and t.reward_weights == {"correct": 1.0, "short": 0.5}
        assert t.reward == pytest.approx(c["correct"] + 0.5 * c["short"]) and 0.0 < c["short"] <= 1.0
        assert t.verifier_name == "dataset.reward_funcs" and t.verifier_revision.startswith("rf-")
    # the slow row's async call ran past timeout_s = 0.5 s in the worker: infra_failure, no reward
    assert len(infra) == 2 * 2 and {t.task_id for t in infra} == {"s"}
    assert all("timed out after 0.5 s" in t.verifier_output["infra"] for t in infra)
    # every call ran in a worker, not in this (the driver's) process (learner ranks: rollouts stay in the driver)
    calls = [line.split() for line in (tmp_path / "calls.log").read_text().splitlines()]
    assert {name for name, _ in calls} == {"correct", "short"}
    assert (str(os.getpid()) not in {pid for _, pid in calls}) == in_workers


@pytest.mark.timeout(600)
@pytest.mark.parametrize("overrides", [
    ["rl.mode=async", "rl.max_staleness=1"],  # spawned worker processes
    ["run.backend=ray"],  # the sync loop's rollouts in a Ray actor
    pytest.param(["run.backend=ray", "rl.mode=async", "rl.max_staleness=1"], marks=pytest.mark.slow),  # async on Ray
    pytest.param(["learner.ranks=2", "model.device=cpu"], marks=pytest.mark.slow),  # a sharded learner
], ids=["async", "ray", "ray-async", "ranks2"])
def test_reward_funcs_run_in_workers(tmp_path, monkeypatch, overrides):
    if "run.backend=ray" in overrides:
        pytest.importorskip("ray")
    folder = _folder(tmp_path, monkeypatch)
    run = tracerl.train("recipe.yaml", *overrides, **{"run.root": str(folder / "runs")})
    _check(folder, run, in_workers="learner.ranks=2" not in overrides)
    backend = json.loads((run.run_dir / "manifest.json").read_text())["backend"]["name"]
    assert backend == ("ray" if "run.backend=ray" in overrides else "local")
