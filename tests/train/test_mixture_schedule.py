"""`mixture.schedule: alternate`: every batch holds one environment, the environments taking turns at their
target shares — the order worked by hand, the state that resumes it, a whole run, and the load checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracerl.config import load_recipe
from tracerl.contract.task import Task
from tracerl.errors import UserError
from tracerl.store import Store
from tracerl.tasks import UniformSampler
from tracerl.run.multienv import EnvMixtureSampler

MINI = str(Path(__file__).with_name("multi_env_mini.yaml"))


def _sampler(schedule: str) -> EnvMixtureSampler:
    pools = {e: [Task(id=f"{e}-{i}", source=e, prompt="p") for i in range(10)] for e in ("a", "b", "c")}
    return EnvMixtureSampler({e: UniformSampler(ts, seed=1) for e, ts in pools.items()}, {"a": 2, "b": 1, "c": 1},
                             schedule=schedule)


def test_alternate_gives_whole_batches_in_turns_worked_by_hand():
    # credit after adding 1/2, 1/4, 1/4 per batch, the due environment (largest, ties by name) paying 1:
    #   (.5, .25, .25) -> a;  (0, .5, .5) -> b (tie, by name);  (.5, -.25, .75) -> c;  (1, 0, 0) -> a
    s = _sampler("alternate")
    batches = [[t.source for t in s.next_batch(3)] for _ in range(4)]
    assert batches == [["a"] * 3, ["b"] * 3, ["c"] * 3, ["a"] * 3]
    assert s.metrics()["tasks/env_share/a"] == pytest.approx(0.5)
    assert s.metrics()["tasks/env_share/b"] == pytest.approx(0.25)
    mixed = _sampler("mixed")  # the default splits every batch instead: 2 : 1 : 1
    assert [t.source for t in mixed.next_batch(4)] == ["a", "a", "b", "c"]


def test_alternate_resumes_at_the_same_turn():
    s = _sampler("alternate")
    s.next_batch(2)
    state = s.state_dict()
    nxt = [[t.id for t in s.next_batch(2)] for _ in range(3)]
    again = _sampler("alternate")
    again.load_state_dict(state)
    assert [[t.id for t in again.next_batch(2)] for _ in range(3)] == nxt


def test_alternate_run_draws_one_environment_per_step_at_the_shares(tmp_path):
    from tracerl.run.pipeline import run_recipe

    recipe = load_recipe(MINI, [f"run.dir={tmp_path / 'run'}", "mixture={schedule: alternate}", "rl.steps=4",
                                "rl.eval_every=0", "rl.checkpoint_every=0", "stages=[sft, rl]"])
    res = run_recipe(recipe)
    with Store(res.run_dir / "store.sqlite") as store:
        envs = [{t.env_name for t in store.trajectories(stage="rl", step=k)} for k in range(1, 5)]
    # shares 1/2, 1/4, 1/4 (recipe order math_tool, arith, search_qa); ties go to the name first in order
    assert envs == [{"math_tool"}, {"arith"}, {"search_qa"}, {"math_tool"}]


@pytest.mark.parametrize("overrides, words", [
    (["mixture={schedule: alternate, loss_share: episodes}"], "has no effect with mixture.schedule: alternate"),
    (["mixture={schedule: alternate}", "envs.0.tasks={sampler: {kind: dynamic}}"], "does not combine with dynamic sampling"),
    (["mixture={schedule: alternate}", "rl.algorithm={name: dapo}"], "does not combine with dynamic sampling"),
])
def test_alternate_where_it_cannot_work_is_refused(overrides, words):
    with pytest.raises(UserError) as err:
        load_recipe(MINI, overrides)
    assert words in str(err.value)


def test_schedule_without_envs_is_refused():
    with pytest.raises(UserError) as err:
        load_recipe("smoke", ["mixture.schedule=alternate"])
    assert "mixture: options apply only to a run over several environments" in str(err.value)
