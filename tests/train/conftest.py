"""A one-turn env with a reward the tiny model can earn from the start: trainer tests need real updates."""

import logging

import pytest

import async_helpers

from tracerl.envs import EnvSpec, get_env
from tracerl.envs.base import register_env


class ParityEnv(async_helpers.ParityEnv):
    """One turn; reward 1 when the action has an even number of characters (a learnable signal).
    The async tests' env (async_helpers, importable by spawned workers) under its own name, keeping its task."""

    name = "parity"

    def reset(self, task, seed):
        self.task = task
        return super().reset(task, seed)


def parity_spec() -> EnvSpec:
    base = get_env("math_tool")
    return EnvSpec(name="parity", revision="1", make=ParityEnv, generate=base.generate, expert=base.expert,
                   reward_weights={"correct": 1.0}, stop_strings=("</answer>",), special_tokens=base.special_tokens)


@pytest.fixture(scope="session")
def parity_env() -> EnvSpec:
    """Registers the parity env (math_tool's tasks and expert) and returns its spec."""
    return register_env(parity_spec())


@pytest.fixture(scope="session")
def ray_local():
    """A real local Ray runtime on 2 CPUs (run.backend: ray), started once for the tests that ask for it."""
    import ray

    ray.init(address="local", num_cpus=2, num_gpus=0, include_dashboard=False, logging_level=logging.ERROR,
             object_store_memory=256 << 20)
    yield ray
    ray.shutdown()


@pytest.fixture
def role_actors():
    """Closes the role actors a test placed (`placement.<role>.where: ray`) after it, as a run does at its end, so
    their CPUs are free for the next test on the shared runtime."""
    yield
    from tracerl.placement import remote_roles
    from tracerl.rollout import ray_backend

    while remote_roles._OPEN:
        group = remote_roles._OPEN.popitem()[1]
        group.close()
        if group in ray_backend._OPEN:
            ray_backend._OPEN.remove(group)
