"""`env.name: openenv:<file.py>:<Class>`: an openenv-core environment written in the test (guess a number, two
tries, reward from its own step) trains the tiny model (SFT on its expert, then 2 RL steps) through tracerl's agent loop."""

import random
import textwrap

import pytest

pytest.importorskip("openenv.core.env_server.interfaces",
                    reason="the openenv extra is not installed: pip install 'tracerl[openenv]'")

from tracerl.config import load_recipe  # noqa: E402
from tracerl.contract.roles import TerminalReason  # noqa: E402
from tracerl.envs import get_env  # noqa: E402
from tracerl.run.pipeline import run_recipe  # noqa: E402
from tracerl.store import Store  # noqa: E402

ENV = textwrap.dedent('''
    import json
    import random

    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State

    class Guess(Action):
        number: int

    class Hint(Observation):
        message: str

    class GuessEnv(Environment[Guess, Hint, State]):
        """Guess a number in 0..3 in two tries: 1.0 on the first, 0.5 on the second."""

        def reset(self, seed=None, episode_id=None, **kwargs):
            self.secret, self.tries = random.Random(seed).randrange(4), 0
            self._state = State(episode_id=episode_id, step_count=0)
            return Hint(message="guess a number from 0 to 3")

        def step(self, action, timeout_s=None, **kwargs):
            self.tries += 1
            self._state.step_count += 1
            if action.number == self.secret:
                return Hint(message="right", done=True, reward=1.0 if self.tries == 1 else 0.5)
            side = "higher" if action.number < self.secret else "lower"
            return Hint(message=side, done=self.tries >= 2, reward=0.0)

        @property
        def state(self):
            return self._state

    def expert(task, observations, rng):
        return json.dumps({"number": rng.randrange(4)})
''')


@pytest.fixture
def env_name(tmp_path):
    path = tmp_path / "guess_env.py"
    path.write_text(ENV)
    return f"openenv:{path}:GuessEnv"


def test_text_actions_step_the_environment_and_its_rewards_sum(env_name):
    spec = get_env(env_name)
    (task,) = spec.generate("train", 1)  # seed 0
    secret = random.Random(0).randrange(4)
    env = spec.make()
    msgs = env.reset(task, 0)
    assert '"number"' in msgs[0]["content"] and msgs[1]["content"] == '{"message": "guess a number from 0 to 3"}'
    bad = env.step("I think four")  # no JSON: told so, the episode goes on
    assert not bad.terminated and "invalid action" in bad.observation
    wrong = (secret + 1) % 4
    first = env.step(f'my guess: {{"number": {wrong}}}')
    assert not first.terminated and first.observation == '{"message": "%s"}' % ("lower" if wrong > secret else "higher")
    last = env.step(f'{{"number": {secret}}}')
    # found on the second try: 0.0 + 0.5
    assert last.terminated and last.terminal_reason == TerminalReason.EOS and last.reward_components == {"reward": 0.5}
    assert last.info["invalid_actions"] == 1 and last.info["env_steps"] == 2
    assert {t.metadata["seed"] for t in spec.generate("heldout", 3)} == {1_000_000, 1_000_001, 1_000_002}


def test_an_openenv_environment_trains_two_steps_with_its_rewards_in_the_store(tmp_path, env_name):
    run_dir = tmp_path / "oe"
    recipe = load_recipe("smoke", ["run.threads=1", "rl.steps=2", "rl.checkpoint_every=0", "stages=[sft, rl]",
                                   "sft.epochs=3", f"env.name={env_name}", "env.max_new_tokens=12", "env.max_turns=3", "env.max_tokens=400",
                                   f"run.dir={run_dir}"])
    run_recipe(recipe)
    with Store(run_dir / "store.sqlite") as store:
        trajs = list(store.trajectories(stage="rl"))
    # the module's expert taught the JSON action (SFT), so some games finish within max_turns
    assert trajs and any(t.terminal_reason == TerminalReason.EOS for t in trajs)
    versions = {v for t in trajs for v, r in zip(t.policy_versions, t.roles) if r.name == "ACTION"}
    assert len(versions) == 2 and max(versions) == min(versions) + 1  # two RL steps, two consecutive versions
    for t in trajs:
        assert t.verifier_name == env_name and t.verifier_revision.startswith("openenv-")
        assert t.reward_weights == {"reward": 1.0}
        if t.terminal_reason == TerminalReason.EOS:  # a finished game: 0, 0.5 or 1
            assert t.reward_components["reward"] in (0.0, 0.5, 1.0)
        else:  # max_turns without finishing: a truncation, no reward
            assert t.truncated and not t.reward_components.get("reward")
