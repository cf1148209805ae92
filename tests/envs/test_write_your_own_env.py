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


def test_worked_example_is_about_sixty_lines():
    assert len(example_code().strip().splitlines()) <= 75  # 62 before it grew its registered verifier


def test_worked_example_runs_and_registers_an_env(monkeypatch):
    base.env_names()  # built-ins registered in the real registry before it is swapped for a copy
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))  # keep the global registry clean
    from tracerl.verifiers import registry

    monkeypatch.setattr(registry, "_FACTORIES", dict(registry._FACTORIES))  # and the verifier registry
    scope: dict = {}
    exec(compile(example_code(), str(DOC), "exec"), scope)  # the example asserts its own success
    env = scope["GuessEnv"]()
    assert isinstance(env, Env) and not any(b is not object for b in type(env).__mro__[1:])
    spec = base.get_env("guess")
    train, held = spec.generate("train", 80), spec.generate("heldout", 19)
    assert not {t.id for t in train} & {t.id for t in held}


def test_the_expert_runs_sft_collection_at_its_default_error_rate(monkeypatch):
    from tracerl.train.demos import collect_demos

    base.env_names()  # built-ins registered in the real registry before it is swapped for a copy
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    from tracerl.verifiers import registry

    monkeypatch.setattr(registry, "_FACTORIES", dict(registry._FACTORIES))
    exec(compile(example_code(), str(DOC), "exec"), {})
    spec = base.get_env("guess")
    tasks = spec.generate("train", 80, seed=0)
    demos = collect_demos(spec, tasks, seed=0, max_turns=12)  # the expert's default error_rate=0.1
    assert len(demos) == len(tasks) == 80  # 99 secrets less the 19 multiples of 5, which are held out
    # the expert's guess always stays in the range the hints leave open, so it always finds the secret
    assert all(d.reward > 0 for d in demos)
    # under smoke's 3 turns most episodes are truncated, and the count says so (the guide quotes this line)
    from tracerl.train.demos import collect_demos_counted

    kept, count = collect_demos_counted(spec, tasks, seed=0, max_turns=3)
    assert len(kept) == count.kept == 4 and count.truncated == 76 and count.infra_failure == 0
    assert count.line() in " ".join(DOC.read_text().split())
    assert collect_demos_counted(spec, tasks, seed=0, max_turns=10)[1].line() == "80 of 80 demonstrations used"


def doc_command(prefix: str) -> list[str]:
    """The guide's command line that starts with `prefix` on a line of its own (in a shell block), split into words."""
    import shlex

    (line,) = [x for x in DOC.read_text().splitlines() if x.startswith(prefix)]
    return shlex.split(line)


def _cli(*args, cwd, timeout=300):
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    return subprocess.run([sys.executable, "-m", "tracerl.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)


def test_the_doc_example_trains_from_the_cli_with_import(tmp_path):
    import json

    (tmp_path / "guess_env.py").write_text(example_code())  # the doc's block, verbatim
    listed = _cli("envs", "--import", "guess_env", cwd=tmp_path, timeout=120)
    assert listed.returncode == 0 and "guess" in listed.stdout, listed.stderr
    missing = _cli("train", "smoke", "env.name=guess", f"run.dir={tmp_path / 'no'}", cwd=tmp_path, timeout=120)
    assert missing.returncode == 2 and "unknown environment 'guess'" in missing.stderr
    assert not (tmp_path / "no").exists()  # failed before the run directory was created
    command = doc_command("tracerl train smoke --import guess_env")  # the guide's one-minute command, as printed
    assert command[:2] == ["tracerl", "train"]
    proc = _cli(*command[1:], f"run.dir={tmp_path / 'run'}", "run.threads=1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # it trains on every demonstration, and says so before SFT
    assert "collected 80 expert demonstrations through guess" in proc.stdout
    assert ": 80 of 80 demonstrations used\n" in proc.stdout and "sft: 80 demonstrations" in proc.stdout
    evals = json.loads((tmp_path / "run" / "summary.json").read_text())["evals"]
    assert [e["after"] for e in evals] == ["sft", "rl"]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["env"] == {"name": "guess", "revision": "guess-1"}


def test_an_entry_point_registers_an_env(tmp_path, monkeypatch):
    import sys

    (tmp_path / "guess_env.py").write_text(example_code())
    dist = tmp_path / "guess_env-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: guess-env\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[tracerl.envs]\nguess = guess_env\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    base.env_names()  # built-ins registered in the real registry before it is swapped for a copy
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    monkeypatch.setattr(base, "_plugins_loaded", False)
    monkeypatch.delitem(sys.modules, "guess_env", raising=False)
    assert "guess" in base.env_names() and base.get_env("guess").revision == "guess-1"
