"""Envs for the async tests, in a module a spawned rollout worker can import (it registers them on import)."""

import time

from tracerl.contract import TerminalReason
from tracerl.envs import EnvSpec, Step, get_env
from tracerl.envs.base import register_env


class ParityEnv:
    """One turn; reward 1 when the action has an even number of characters."""

    name, revision = "parity_async", "1"

    def reset(self, task, seed):
        return [{"role": "user", "content": str(task.prompt)}]

    def step(self, action_text):
        return Step(terminated=True, terminal_reason=TerminalReason.EOS,
                    reward_components={"correct": float(len(action_text) % 2 == 0)})

    def state_hash(self):
        return "s"


class SlowParityEnv(ParityEnv):
    """The parity env whose step takes 3 s: a worker can be killed mid-episode."""

    name = "parity_slow"

    def step(self, action_text):
        time.sleep(3.0)
        return super().step(action_text)


class TurnsEnv(ParityEnv):
    """Three turns: the first two answer with an observation, the third ends with the parity reward."""

    name = "turns"

    def reset(self, task, seed):
        self.turn = 0
        return super().reset(task, seed)

    def step(self, action_text):
        self.turn += 1
        if self.turn < 3:
            return Step(observation="ok", terminated=False)
        return super().step(action_text)


def _spec(cls) -> EnvSpec:
    base = get_env("math_tool")
    return EnvSpec(name=cls.name, revision="1", make=cls, generate=base.generate, expert=base.expert,
                   reward_weights={"correct": 1.0}, stop_strings=("</answer>",), special_tokens=base.special_tokens)


PARITY, SLOW, TURNS = (register_env(_spec(c)) for c in (ParityEnv, SlowParityEnv, TurnsEnv))
