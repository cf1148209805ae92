"""`env.name: openenv:<module>:<Class>`: an environment written against openenv-core, played by tracerl's agent loop.

`<module>` is an importable module or a `.py` file; `<Class>` an `openenv.core.env_server.interfaces.Environment`
subclass with a no-argument constructor, typed `Environment[MyAction, MyObservation, MyState]`. In-process: the
class is instantiated here (one instance per episode), not reached through an OpenEnv HTTP/WebSocket server.

- **Tasks are seeds.** Train task `i` is `reset(seed=i)`; held-out task `i` is `reset(seed=1_000_000 + i)`, so
  the splits never share a start state. A task's `answer` is its seed (the environment holds the ground truth).
- **Observations are text.** The observation's fields other than `done`, `reward` and `metadata` as one JSON
  object; the first one follows a system message giving the action's JSON schema.
- **Actions are parsed** by the module's `parse_action(text) -> Action` when it defines one, else as the first
  JSON object in the reply validated against the Action type (`model_validate`). A reply that does not parse
  is answered with the error (the episode goes on; `env.max_turns` bounds it) and counted in
  `verifier_output["invalid_actions"]`.
- **Rewards** are the observations' `reward`s summed over the episode: one component `reward` (weight 1).
  Rewards come from the environment's own `step`, so they cannot be recomputed from a stored trajectory.
- **The scripted expert** (SFT demonstrations, and the tiny model's vocabulary) is the module's
  `expert(task, observations, rng) -> str` when it defines one (tracerl's expert signature), else none.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import typing
from typing import Any

from tracerl.contract.roles import TerminalReason
from tracerl.contract.task import Task
from tracerl.envs.adapters._common import load_user_module
from tracerl.envs.base import EnvSpec, Message, Step, register_env
from tracerl.errors import UserError
from tracerl.verifiers.registry import register_verifier

HELDOUT_SEED = 1_000_000
_SKIP = ("done", "reward", "metadata")


def _types(cls) -> tuple[type, type]:
    """(Action type, Observation type) from `Environment[Act, Obs, State]` among the class's bases."""
    from openenv.core.env_server.interfaces import Environment

    for klass in cls.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            if typing.get_origin(base) is Environment:
                args = typing.get_args(base)
                if len(args) >= 2 and all(isinstance(a, type) for a in args[:2]):
                    return args[0], args[1]
    raise UserError(f"{cls.__name__} does not say its Action type; declare it as Environment[MyAction, MyObservation, "
                    "MyState]")


def observation_text(obs) -> str:
    return json.dumps({k: v for k, v in obs.model_dump(mode="json").items() if k not in _SKIP}, sort_keys=True)


def parse_json_action(action_type, text: str):
    """The first JSON object in `text` as `action_type` (ValueError naming what is wrong)."""
    start = text.find("{")
    while start >= 0:
        try:
            obj, _ = json.JSONDecoder().raw_decode(text[start:])
            return action_type.model_validate(obj)
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
    raise ValueError("no JSON object in the reply")


class OpenEnvAdapter:
    """One OpenEnv environment instance per episode, stepped with parsed text actions."""

    def __init__(self, name: str, cls, action_type, parse, system: str, revision: str):
        self.name, self.cls, self.action_type, self.parse = name, cls, action_type, parse
        self.system, self.revision = system, revision
        self.env = None
        self.total, self.invalid, self.steps = 0.0, 0, 0

    def reset(self, task: Task, seed: int) -> list[Message]:
        self.env, self.total, self.invalid, self.steps = self.cls(), 0.0, 0, 0
        obs = self.env.reset(seed=int(task.metadata["seed"]), episode_id=task.id)
        return [{"role": "system", "content": self.system}, {"role": "user", "content": observation_text(obs)}]

    def step(self, action_text: str) -> Step:
        ident = {"verifier": self.name, "verifier_revision": self.revision}
        try:
            action = self.parse(action_text)
        except Exception as err:  # the policy's fault: tell it and go on
            self.invalid += 1
            return Step(observation=f"invalid action ({type(err).__name__}: {str(err)[:200]}); reply with one JSON "
                                    "object matching the action schema", info={"invalid_actions": self.invalid})
        try:
            obs = self.env.step(action)
        except Exception as err:  # the environment's fault: never a reward
            return Step(terminated=True, terminal_reason=TerminalReason.INFRA_FAILURE,
                        info={"infra": f"{type(err).__name__}: {err}", **ident})
        self.steps += 1
        self.total += float(obs.reward or 0.0)
        if obs.done:
            return Step(terminated=True, terminal_reason=TerminalReason.EOS, reward_components={"reward": self.total},
                        info={"invalid_actions": self.invalid, "env_steps": self.steps, **ident})
        return Step(observation=observation_text(obs))

    def state_hash(self) -> str:
        state = self.env.state.model_dump_json() if self.env is not None else ""
        return hashlib.sha256(f"{state}|{self.total}".encode()).hexdigest()[:16]


class OpenEnvRewards:
    """The registered verifier of an OpenEnv environment: its identity; rewards come from `step`."""

    components, primary = ("reward",), "reward"

    def __init__(self, name: str, revision: str):
        self.name, self.revision = name, revision

    def verify(self, task, trajectory):
        raise UserError(f"{self.name}: an OpenEnv environment's rewards come from its step(); they cannot be "
                        "recomputed from a stored trajectory")


def install(name: str) -> EnvSpec:
    target = name.partition(":")[2]
    module, sep, clsname = target.rpartition(":")
    if not sep or not module or not clsname:
        raise UserError(f"env.name {name!r} must look like openenv:module:Class or openenv:path/to/env.py:Class")
    try:
        import openenv.core.env_server.interfaces  # noqa: F401
    except ImportError:
        raise UserError("env.name openenv:... needs openenv-core; pip install 'tracerl[openenv]'") from None
    mod, where = load_user_module(module, "openenv")
    cls = getattr(mod, clsname, None)
    if not inspect.isclass(cls):
        raise UserError(f"{where} has no class {clsname!r}")
    action_type, _ = _types(cls)
    parse = getattr(mod, "parse_action", None) or (lambda text: parse_json_action(action_type, text))
    try:
        src = inspect.getsource(mod)
    except (OSError, TypeError):
        src = f"{where}:{clsname}"
    revision = "openenv-" + hashlib.sha256(src.encode()).hexdigest()[:12]
    system = ("You act in an environment. Each observation is a JSON object. Reply with one action: a JSON object "
              f"matching this schema: {json.dumps(action_type.model_json_schema(), sort_keys=True)}")
    user_expert = getattr(mod, "expert", None)

    def expert(task, observations, rng, **kwargs) -> str:
        if user_expert is None:
            raise UserError(f"{where} defines no expert(task, observations, rng); set sft.data or drop the sft stage "
                            "and set model.path")
        return user_expert(task, observations, rng)

    def generate(split: str, n: int, seed: int = 0, difficulty=None) -> list[Task]:
        base = HELDOUT_SEED if split == "heldout" else 0
        return [Task(id=f"{name}:seed{base + i}", source=name, prompt=f"reset(seed={base + i})", split=split,
                     source_revision=revision, answer=base + i, metadata={"seed": base + i}, license="unknown") for i in range(n)]

    register_verifier(name, lambda: OpenEnvRewards(name, revision), replace=True)
    return register_env(EnvSpec(name=name, revision=revision,
                                make=lambda: OpenEnvAdapter(name, cls, action_type, parse, system, revision),
                                generate=generate, expert=expert, reward_weights={"reward": 1.0}, stop_strings=(),
                                description=f"the OpenEnv environment {clsname} of {where}", verifier=name))


__all__ = ["install", "OpenEnvAdapter", "parse_json_action", "observation_text"]
