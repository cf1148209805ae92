"""`env.name: verifiers:<file.py>`: a verifiers 0.4 taskset written in the test trains the tiny model for 2 RL
steps, its `@vf.reward` functions named components (with their weights) of every stored trajectory."""

import json
import textwrap

import pytest

pytest.importorskip("verifiers.v1", reason="the verifiers extra is not installed: pip install 'tracerl[verifiers]'")

from tracerl.config import load_recipe  # noqa: E402
from tracerl.envs import get_env  # noqa: E402
from tracerl.errors import UserError  # noqa: E402
from tracerl.run.pipeline import run_recipe  # noqa: E402
from tracerl.store import Store  # noqa: E402

ENV = textwrap.dedent('''
    import verifiers.v1 as vf

    class Data(vf.TaskData):
        answer: str

    class AddTask(vf.Task[Data]):
        @vf.reward
        async def correct(self, task, trace) -> float:
            return float(trace.last_reply.strip() == task.answer)

        @vf.reward(weight=0.25)
        async def brief(self, trace) -> float:
            return float(len(trace.last_reply) <= 4)

    class Additions(vf.Taskset[AddTask]):
        def load(self):
            for a in range(12):
                for b in range(5):
                    yield AddTask(Data(prompt=f"What is {a} + {b}?", system_prompt="Answer with the number.",
                                       answer=str(a + b)))

    def load_environment():
        return Additions(vf.TasksetConfig())
''')


@pytest.fixture
def env_file(tmp_path):
    path = tmp_path / "add_env.py"
    path.write_text(ENV)
    return path


def test_the_tasks_and_rewards_of_a_verifiers_taskset(env_file):
    spec = get_env(f"verifiers:{env_file}")
    assert spec.reward_weights == {"brief": 0.25, "correct": 1.0}
    train, held = spec.generate("train", 100), spec.generate("heldout", 100)
    assert len(train) + len(held) == 60 and held and not {t.id for t in train} & {t.id for t in held}
    task = next(t for t in train if t.prompt[-1]["content"] == "What is 3 + 4?")
    assert task.prompt[0] == {"role": "system", "content": "Answer with the number."}
    env = spec.make()
    env.reset(task, 0)
    # "7" is right and brief: 1 and 1; "it is 8" is wrong and long: 0 and 0
    assert env.step("7").reward_components == {"correct": 1.0, "brief": 1.0}
    env.reset(task, 0)
    assert env.step("it is 8").reward_components == {"correct": 0.0, "brief": 0.0}


def test_a_module_without_load_environment_is_one_sentence(tmp_path):
    bad = tmp_path / "bad_env.py"
    bad.write_text("x = 1\n")
    with pytest.raises(UserError, match="has no load_environment"):
        get_env(f"verifiers:{bad}")


def test_a_verifiers_taskset_trains_two_steps_with_its_rewards_in_the_store(tmp_path, env_file):
    run_dir = tmp_path / "vf"
    recipe = load_recipe("smoke", ["run.threads=1", "rl.steps=2", "rl.checkpoint_every=0", "stages=[rl]",
                                   f"env.name=verifiers:{env_file}", "env.max_new_tokens=6", f"run.dir={run_dir}"])
    run_recipe(recipe)
    with Store(run_dir / "store.sqlite") as store:
        trajs = list(store.trajectories(stage="rl"))
    # every action token keeps its id, log-prob and the policy version that sampled it: versions 0 and 1
    versions = {v for t in trajs for v, r in zip(t.policy_versions, t.roles) if r.name == "ACTION"}
    assert versions == {0, 1}
    assert all(len(t.behavior_logprobs) == len(t.token_ids) for t in trajs)
    for t in trajs:
        assert set(t.reward_components) == {"correct", "brief"}
        assert t.reward_weights == {"correct": 1.0, "brief": 0.25}
        assert t.reward == pytest.approx(t.reward_components["correct"] + 0.25 * t.reward_components["brief"])
        assert t.verifier_name == f"verifiers:{env_file}" and t.verifier_revision.startswith("vf-")
        assert t.task_id.startswith(f"verifiers:{env_file}:")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in rows if m.get("stage") == "rl" and "reward/mean" in m][:2] == [1, 2]
