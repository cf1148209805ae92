"""`env.name: verifiers:<module>` with a multi-turn verifiers 0.4 `Env` (its `run` drives the conversation with
`Interaction.turn`, as 0.3's `MultiTurnEnv.env_response` did): played by hand through the tracerl env, then
trained for 2 RL steps on the tiny model with its rewards in the store and the env's messages in the user role."""

import textwrap
import uuid

import pytest

pytest.importorskip("verifiers.v1", reason="the verifiers extra is not installed: pip install 'tracerl[verifiers]'")

from tracerl.config import load_recipe  # noqa: E402
from tracerl.contract import TokenRole  # noqa: E402
from tracerl.envs import get_env  # noqa: E402
from tracerl.errors import UserError  # noqa: E402
from tracerl.run.pipeline import run_recipe  # noqa: E402
from tracerl.store import Store  # noqa: E402

ENV = textwrap.dedent('''
    import asyncio
    import verifiers.v1 as vf

    class Data(vf.TaskData):
        answer: str

    class SayTask(vf.Task[Data]):
        @vf.reward
        async def correct(self, task, trace) -> float:
            return float(trace.last_reply.strip() == task.answer)

        @vf.reward(weight=0.5)
        async def first_try(self, trace) -> float:  # 1 when the first reply was already right
            replies = [n.message.content for n in trace.nodes if n.sampled]
            return 1.0 / len(replies)

    class SayTaskset(vf.Taskset[SayTask]):
        def load(self):
            for a in range(40):
                yield SayTask(Data(prompt=f"Say {a}.", answer=str(a)))

    class ChatConfig(vf.EnvConfig):
        assistant: vf.AgentConfig = vf.AgentConfig()

    class SayEnv(vf.Env[ChatConfig]):
        async def run(self, task, agents):
            async with agents.assistant.interaction(task) as chat:
                seg = await chat.turn()
                for _ in range(2):  # at most three replies
                    if seg.terminated or seg.last_reply == task.data.answer:
                        break
                    await asyncio.sleep(0)
                    seg = await chat.turn(f"No. It has {len(task.data.answer)} digit(s).")

    __all__ = ["SayTaskset", "SayEnv"]

    def load_environment():
        return SayEnv(ChatConfig(taskset={"id": __name__}))
''')


@pytest.fixture
def env_name(tmp_path, monkeypatch):
    module = f"say_env_{uuid.uuid4().hex[:8]}"  # a package: verifiers loads the taskset by its id
    (tmp_path / module).mkdir()
    (tmp_path / module / "__init__.py").write_text(ENV)
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"verifiers:{module}"


def test_the_env_run_drives_the_conversation_turn_by_turn(env_name):
    spec = get_env(env_name)
    assert spec.reward_weights == {"correct": 1.0, "first_try": 0.5} and "multi-turn (SayEnv)" in spec.description
    task = next(t for t in spec.generate("train", 100) + spec.generate("heldout", 100)
                if t.prompt[-1]["content"] == "Say 17.")
    env = spec.make()
    assert env.reset(task, 0) == [{"role": "user", "content": "Say 17."}]
    step = env.step("3")  # wrong: the env answers as the user, the episode goes on
    assert not step.terminated and step.observation == "No. It has 2 digit(s)." and step.info["observation_role"] == "user"
    step = env.step("17")  # right on the second reply: correct 1, first_try 1/2
    assert step.terminated and step.reward_components == {"correct": 1.0, "first_try": 0.5}
    env.reset(task, 0)
    for reply in ("1", "2"):
        assert not env.step(reply).terminated
    # three wrong replies: run() returns after the third; correct 0, first_try 1/3
    assert env.step("4").reward_components == pytest.approx({"correct": 0.0, "first_try": 1 / 3})


def test_an_env_with_two_agents_is_one_sentence(tmp_path, monkeypatch):
    module = f"two_env_{uuid.uuid4().hex[:8]}"
    (tmp_path / module).mkdir()
    (tmp_path / module / "__init__.py").write_text(ENV.replace(
        "assistant: vf.AgentConfig = vf.AgentConfig()", "assistant: vf.AgentConfig = vf.AgentConfig()\n"
        "    user: vf.AgentConfig = vf.AgentConfig()"))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UserError, match=r"declares 2 agents \(assistant, user\); tracerl's policy plays one"):
        get_env(f"verifiers:{module}")


def test_a_multi_turn_verifiers_env_trains_two_steps_with_its_rewards_in_the_store(tmp_path, env_name):
    run_dir = tmp_path / "vf"
    recipe = load_recipe("smoke", ["run.threads=1", "rl.steps=2", "rl.checkpoint_every=0", "stages=[rl]",
                                   f"env.name={env_name}", "env.max_new_tokens=4", "env.max_turns=3",
                                   "env.max_tokens=200", f"run.dir={run_dir}"])
    run_recipe(recipe)
    with Store(run_dir / "store.sqlite") as store:
        per_step = [list(store.trajectories(stage="rl", step=s)) for s in (1, 2)]
    assert [len(x) for x in per_step] == [recipe.rl.prompts_per_step * recipe.rl.group_size] * 2
    trajs = per_step[0] + per_step[1]
    versions = {v for t in trajs for v, r in zip(t.policy_versions, t.roles) if r == TokenRole.ACTION}
    assert versions == {0, 1}
    several = 0
    for t in trajs:
        assert t.reward_weights == {"correct": 1.0, "first_try": 0.5}
        assert t.reward == pytest.approx(t.reward_components["correct"] + 0.5 * t.reward_components["first_try"])
        assert t.verifier_name == env_name and t.terminal_reason.value == "eos"
        actions = sum(1 for s in t.spans if s.kind == "action")
        # first_try = 1 / (number of replies): the env's run saw every sampled turn
        assert t.reward_components["first_try"] == pytest.approx(1.0 / actions) and 1 <= actions <= 3
        obs = [s for s in t.spans if s.kind == "observation"]
        assert len(obs) == actions - 1
        for o in obs:  # the env's message in the user role: the template closes the reply and opens the next turn
            assert t.roles[o.start - 1] == TokenRole.TEMPLATE and t.roles[o.end] == TokenRole.TEMPLATE
            assert set(t.roles[o.start:o.end]) == {TokenRole.OBSERVATION}
        several += actions > 1
    assert several > 0  # the untrained policy is mostly wrong: the env's user turns were played


def test_a_user_turn_is_rendered_by_the_chat_template(tmp_path):
    from tracerl.models import build_tiny, load_model_and_tokenizer
    from tracerl.rollout.render import render_user_turn

    path = build_tiny(tmp_path / "m", ["Say 17. No. It has 2 digit(s)."], tags=(), vocab_size=300, hidden_size=32,
                      num_layers=1, num_heads=2, intermediate_size=64, max_positions=512, seed=1)
    _, tok = load_model_and_tokenizer(path)
    ids, roles = render_user_turn(tok, "No. It has 2 digit(s).", None)
    # exactly what the template renders between an assistant reply and the next generation prompt
    full = tok.apply_chat_template([{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"},
                                    {"role": "user", "content": "No. It has 2 digit(s)."}], tokenize=False,
                                   add_generation_prompt=True)
    assert full.endswith(tok.decode(ids)) and tok.decode(ids).startswith("<|im_end|>\n<|im_start|>user\n")
    body = [i for i, r in zip(ids, roles) if r == TokenRole.OBSERVATION]
    assert tok.decode(body) == "No. It has 2 digit(s)." and roles[0] == roles[-1] == TokenRole.TEMPLATE


@pytest.mark.slow  # a spawned worker imports verifiers (~30 s on a loaded 2-core machine)
def test_a_multi_turn_verifiers_env_trains_under_rl_mode_async(tmp_path, env_name):
    run_dir = tmp_path / "vf_async"
    run_recipe(load_recipe("smoke", ["run.threads=1", "rl.steps=2", "rl.checkpoint_every=0", "stages=[rl]",
                                     "rl.mode=async", f"env.name={env_name}", "env.max_new_tokens=4", "env.max_turns=3",
                                     "env.max_tokens=200", f"run.dir={run_dir}"]))
    with Store(run_dir / "store.sqlite") as store:
        trajs = [t for s in (1, 2) for t in store.trajectories(stage="rl", step=s)]
    assert trajs and all(set(t.reward_components) == {"correct", "first_try"} for t in trajs)
    for t in trajs:  # the worker process drove the env's run(): one user-role observation per extra reply
        actions = sum(1 for s in t.spans if s.kind == "action")
        assert t.reward_components["first_try"] == pytest.approx(1.0 / actions)
        assert sum(1 for s in t.spans if s.kind == "observation") == actions - 1
