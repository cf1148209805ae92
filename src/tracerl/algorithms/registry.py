"""The algorithm registry: every estimator, loss, correction, controller and selection rule by name.

Every entry is reachable from a recipe: an `rl.algorithm` spec (`tracerl.algorithms.spec`) calls it
when its setting is on (`tests/train/test_every_algorithm_trains.py` takes a trainer step with each).
Helpers the specs use internally (aggregation, chunked log-probs) are plain functions, not entries.
Each entry carries a one-line description and its source so that `tracerl algorithms` can say what a
name means and where it comes from.

Modules register their functions at import time with `@register(...)`; `names()`, `get()` and
`entries()` import every algorithm module first, so the listing is complete however the package was
imported.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

KINDS = ("advantage", "loss", "correction", "kl", "reward", "selection", "controller", "metric", "util")

# Modules whose import registers entries; listed here so the registry is complete on first use.
_MODULES = (
    "tracerl.algorithms.advantages",
    "tracerl.algorithms.losses",
    "tracerl.algorithms.rewards",
    "tracerl.algorithms.selection",
    "tracerl.algorithms.entropy_control",
    "tracerl.algorithms.passk",
    "tracerl.algorithms.logprobs",
)


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str
    fn: Any
    description: str
    source: str

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "kind": self.kind, "description": self.description, "source": self.source}


_REGISTRY: dict[str, Entry] = {}
_loaded = False


def register(name: str, *, kind: str, description: str, source: str) -> Callable[[Any], Any]:
    """Decorator that records `fn` under `name`. A second registration of a name is an error."""
    if kind not in KINDS:
        raise ValueError(f"algorithm kind {kind!r} for {name!r} is not one of {', '.join(KINDS)}")
    if not description or "\n" in description:
        raise ValueError(f"algorithm {name!r} needs a one-line description")
    if not source:
        raise ValueError(f"algorithm {name!r} needs a source")

    def decorate(fn: Any) -> Any:
        existing = _REGISTRY.get(name)
        if existing is not None and existing.fn is not fn:
            same = getattr(existing.fn, "__qualname__", None) == getattr(fn, "__qualname__", None) and getattr(
                existing.fn, "__module__", None
            ) == getattr(fn, "__module__", None)
            if not same:  # re-import of the same module (importlib.reload) is fine; a clash is not
                raise ValueError(f"algorithm name {name!r} is already registered by {existing.fn!r}")
        _REGISTRY[name] = Entry(name, kind, fn, description, source)
        return fn

    return decorate


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    for module in _MODULES:
        importlib.import_module(module)
    _loaded = True


def names() -> list[str]:
    """Every registered algorithm name, sorted."""
    _load_all()
    return sorted(_REGISTRY)


def entries() -> list[Entry]:
    """Every registry entry, sorted by name."""
    _load_all()
    return [_REGISTRY[n] for n in sorted(_REGISTRY)]


def get(name: str) -> Any:
    """The function (or class) registered as `name`; an unknown name names the nearest valid one."""
    _load_all()
    try:
        return _REGISTRY[name].fn
    except KeyError:
        import difflib

        near = difflib.get_close_matches(name, list(_REGISTRY), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else f"; known names: {', '.join(sorted(_REGISTRY))}"
        raise KeyError(f"no algorithm named {name!r}{hint}") from None


def describe(name: str) -> Entry:
    """The full registry entry for `name`."""
    get(name)
    return _REGISTRY[name]
