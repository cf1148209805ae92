"""The worked example in docs/write-your-own-env.md runs as written and plugs in without subclassing."""

import re
from pathlib import Path

import tracerl.envs.base as base
from tracerl.envs.base import Env

DOC = Path(__file__).resolve().parents[2] / "docs" / "write-your-own-env.md"


def example_code() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) == 1
    return blocks[0]


def test_worked_example_is_about_fifty_lines():
    assert len(example_code().strip().splitlines()) <= 62


def test_worked_example_runs_and_registers_an_env(monkeypatch):
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))  # keep the global registry clean
    scope: dict = {}
    exec(compile(example_code(), str(DOC), "exec"), scope)  # the example asserts its own success
    env = scope["GuessEnv"]()
    assert isinstance(env, Env) and not any(b is not object for b in type(env).__mro__[1:])
    spec = base.get_env("guess")
    train, held = spec.generate("train", 80), spec.generate("heldout", 19)
    assert not {t.id for t in train} & {t.id for t in held}
