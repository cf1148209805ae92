"""The predeclared gate file: loading, its digest, and PASS/FAIL of observed numbers against it.

A level's gate is a list of named checks, each an observed number against a `min` and/or `max` read
from the file (`Check`); the level passes only when every check does. Thresholds never come from code."""

from __future__ import annotations

import dataclasses
import hashlib
import math
from pathlib import Path

import yaml

GATES_FILE = Path(__file__).parents[1] / "ladder_gates.yaml"


class GateFileError(ValueError):
    """The gate file is missing, malformed, or lacks a threshold a level needs."""


def load(path: Path = GATES_FILE) -> tuple[dict, str]:
    """(the parsed gate file, its sha256). Every level is a mapping of threshold names to numbers or
    [min, max] pairs."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise GateFileError(f"cannot read the gate file {path}: {e.strerror}") from None
    try:
        doc = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise GateFileError(f"gate file {path} is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        raise GateFileError(f"gate file {path} must map level names (level0, level2, ...) to threshold mappings")
    return doc, hashlib.sha256(raw).hexdigest()


def section_digest(gates: dict, level: str) -> str:
    """sha256 of one level's thresholds (canonical JSON): what a recorded result of that level was judged under,
    so declaring another level's gate later does not void it."""
    import json

    return hashlib.sha256(json.dumps(gates.get(level), sort_keys=True).encode()).hexdigest()


def threshold(gates: dict, level: str, name: str):
    """One threshold; a missing one is an error naming the level and key (never a silent default)."""
    try:
        value = gates[level][name]
    except KeyError:
        raise GateFileError(f"the gate file has no {level}.{name}; declare it before running the level") from None
    if isinstance(value, list):
        if len(value) != 2 or not all(isinstance(v, (int, float)) for v in value) or value[0] > value[1]:
            raise GateFileError(f"{level}.{name} must be a number or a [min, max] pair with min <= max, got {value}")
    elif not isinstance(value, (int, float)) or isinstance(value, bool):
        raise GateFileError(f"{level}.{name} must be a number or a [min, max] pair, got {value!r}")
    return value


@dataclasses.dataclass
class Check:
    """One clause of a gate: `observed` must lie in [min, max] (either bound may be absent)."""

    name: str
    observed: float | None
    min: float | None = None
    max: float | None = None
    note: str = ""

    @property
    def passed(self) -> bool:
        if self.observed is None or (isinstance(self.observed, float) and math.isnan(self.observed)):
            return False  # a number that was not measured never passes
        return (self.min is None or self.observed >= self.min) and (self.max is None or self.observed <= self.max)

    def line(self) -> str:
        bound = " and ".join(b for b in ((f">= {self.min:g}" if self.min is not None else ""),
                                         (f"<= {self.max:g}" if self.max is not None else "")) if b)
        obs = "not measured" if self.observed is None else f"{self.observed:.4g}"
        return f"  [{'PASS' if self.passed else 'FAIL'}] {self.name}: {obs} (needs {bound}){'  ' + self.note if self.note else ''}"


def at_least(name: str, observed, bound, note: str = "") -> Check:
    return Check(name, observed, min=bound, note=note)


def at_most(name: str, observed, bound, note: str = "") -> Check:
    return Check(name, observed, max=bound, note=note)


def within(name: str, observed, pair, note: str = "") -> Check:
    return Check(name, observed, min=pair[0], max=pair[1], note=note)


def verdict(checks: list[Check]) -> str:
    return "PASS" if checks and all(c.passed for c in checks) else "FAIL"


def report(level: int, checks: list[Check]) -> str:
    return "\n".join([f"gate, level {level}:", *(c.line() for c in checks), f"LEVEL {level}: {verdict(checks)}"])
