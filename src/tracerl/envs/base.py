"""The environment protocol (docs/architecture.md, "Tasks and environments") and the registry of built-in environments.

An environment sees text; the agent loop owns tokens. Any object with `name`, `revision`,
`reset(task, seed)`, `step(action_text)` and `state_hash()` plugs in; no subclassing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from tracerl.contract.roles import TerminalReason
from tracerl.contract.task import Task
from tracerl.errors import UserError

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": ...}


@dataclasses.dataclass
class Step:
    """The environment's answer to one policy turn."""

    observation: str | None = None
    terminated: bool = False
    terminal_reason: TerminalReason | None = None
    reward_components: dict[str, float] = dataclasses.field(default_factory=dict)
    info: dict[str, Any] = dataclasses.field(default_factory=dict)


@runtime_checkable
class Env(Protocol):
    name: str
    revision: str

    def reset(self, task: Task, seed: int) -> list[Message]: ...

    def step(self, action_text: str) -> Step: ...

    def state_hash(self) -> str: ...


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """Everything a recipe needs to train on an environment.

    make: builds a fresh env instance (one per episode).
    generate: (split, n, seed, difficulty) -> tasks; held-out and train splits are disjoint.
    expert: (task, observations so far, rng) -> next action text, for SFT demonstrations.
    reward_weights: the weight of each reward component the env reports.
    stop_strings: strings that end a policy turn (tool-call closing tags).
    verifier: the registered verifier (`tracerl.verifiers.registry`) every reward comes from; the
        agent loop records its name and revision in each trajectory.
    special_tokens: tags the built-in tiny tokenizer keeps as single tokens (e.g. "<code>").
    """

    name: str
    revision: str
    make: Callable[..., Env]
    generate: Callable[..., list[Task]]
    expert: Callable[..., str]
    reward_weights: dict[str, float]
    stop_strings: tuple[str, ...]
    special_tokens: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    description: str = ""
    verifier: str = ""


_REGISTRY: dict[str, EnvSpec] = {}
_RESOLVERS: dict[str, Callable[[str], EnvSpec | None]] = {}  # "verifiers" -> installs `verifiers:<module>`


def register_resolver(scheme: str, resolve: Callable[[str], EnvSpec | None]) -> None:
    """Names `<scheme>:<target>` are environments of another framework, built on first use by `resolve`
    (which registers them); envs/adapters registers `verifiers` and `openenv` when the built-ins load."""
    _RESOLVERS[scheme] = resolve


def register_env(spec: EnvSpec) -> EnvSpec:
    _REGISTRY[spec.name] = spec
    return spec


def get_env(name: str) -> EnvSpec:
    _load_builtins()
    scheme = name.split(":", 1)[0] if ":" in name else None
    if name not in _REGISTRY and scheme in _RESOLVERS:  # another framework's env
        _RESOLVERS[scheme](name)
    if name not in _REGISTRY:
        import difflib

        close = difflib.get_close_matches(name, list(_REGISTRY), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(sorted(_REGISTRY))}"
        raise UserError(f"unknown environment {name!r}{hint}")
    return _REGISTRY[name]


def env_names() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


ENTRY_POINT_GROUP = "tracerl.envs"
_plugins_loaded = False


def _load_builtins() -> None:
    import importlib
    import pkgutil

    import tracerl.envs as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        if info.ispkg:
            importlib.import_module(f"tracerl.envs.{info.name}")
    _load_entry_points()


def _load_entry_points() -> None:
    """Environments other packages declare under the `tracerl.envs` entry-point group.

    An entry point may name a module (importing it calls `register_env`), an `EnvSpec`, or a
    callable returning one. A plugin that fails to load prints one line and is skipped, so one
    broken package never hides the others.
    """
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    import sys
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            if callable(obj) and not isinstance(obj, EnvSpec):
                obj = obj()
            if isinstance(obj, EnvSpec):
                register_env(obj)
        except Exception as err:  # a plugin's fault, reported and skipped
            print(f"tracerl: the {ENTRY_POINT_GROUP} entry point {ep.name!r} ({ep.value}) failed to load "
                  f"({type(err).__name__}: {err}); fix or uninstall that package", file=sys.stderr)
