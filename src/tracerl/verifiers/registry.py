"""The registry of named verifiers: every environment rewards through one (docs/write-your-own-env.md).

    register_verifier("math_tool.answer", MathToolAnswer)
    verifier = get_verifier("math_tool.answer")      # a fresh instance (factory keyword arguments pass through)

An environment's `EnvSpec.verifier` names its registered verifier; the environment calls
`get_verifier(name)` when an episode ends and reports exactly the components it returned, and the
agent loop records that verifier's name and revision in the trajectory. Nothing else may compute
a reward (tests/envs/test_rewards_through_verifiers.py replaces each registered verifier and
checks the environment's reward follows it).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from tracerl.errors import UserError

_FACTORIES: dict[str, Callable[..., Any]] = {}
_IDENTITY: dict[str, tuple[str, str]] = {}


def register_verifier(name: str, factory: Callable[..., Any], *, replace: bool = False) -> None:
    """Make `get_verifier(name)` build `factory(**kwargs)`. Names are unique unless `replace`."""
    if not callable(factory):
        raise TypeError(f"register_verifier({name!r}, ...) needs a class or function that builds the verifier")
    same = lambda a, b: a is b or (getattr(a, "__qualname__", None), getattr(a, "__module__", None)) == (  # noqa: E731
        getattr(b, "__qualname__", 0), getattr(b, "__module__", 0))  # a module imported again
    if name in _FACTORIES and not replace and not same(_FACTORIES[name], factory):
        raise ValueError(f"a verifier named {name!r} is already registered; pass replace=True to override it")
    _FACTORIES[name] = factory
    _IDENTITY.pop(name, None)


def get_verifier(name: str, **kwargs: Any) -> Any:
    """A fresh instance of a registered verifier (an environment's package registers its own on import)."""
    if name not in _FACTORIES:
        close = difflib.get_close_matches(name, list(_FACTORIES), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(sorted(_FACTORIES))}"
        raise UserError(f"no verifier named {name!r}; {hint}")
    verifier = _FACTORIES[name](**kwargs)
    if getattr(verifier, "name", None) != name:
        raise ValueError(f"the verifier registered as {name!r} calls itself {getattr(verifier, 'name', None)!r}; "
                         "register it under its own name")
    return verifier


def verifier_identity(name: str) -> tuple[str, str]:
    """(name, revision) of a registered verifier, built once to read them."""
    if name not in _IDENTITY:
        v = get_verifier(name)
        _IDENTITY[name] = (v.name, str(v.revision))
    return _IDENTITY[name]


def verifier_names() -> list[str]:
    """The verifiers registered so far (importing an environment registers its verifier)."""
    return sorted(_FACTORIES)
