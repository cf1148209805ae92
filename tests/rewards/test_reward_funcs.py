"""Reward functions as reward components (verifiers/reward_funcs.py, envs/dataset/, config/reward.py)."""

from __future__ import annotations

import json
import time

import pytest

from tracerl.config import load_recipe
from tracerl.contract.roles import TerminalReason
from tracerl.contract.task import Task
from tracerl.envs.dataset import DatasetEnv, install
from tracerl.errors import UserError
from tracerl.verifiers.reward_funcs import RewardFuncsVerifier, call_func, check_signature, resolve_funcs

REWARDS = '''
import asyncio, time

def correct(completions, answer, **kwargs):
    return [float(c.strip() == str(a)) for c, a in zip(completions, answer)]

def shorter(completions, **kwargs):
    return [1.0 - len(c) / 10 for c in completions]

def hard_only(completions, level, **kwargs):  # None: the function does not apply to the row
    return [1.0 if lv == "hard" else None for lv in level]

async def async_len(prompts, completions):
    await asyncio.sleep(0)
    return [float(len(p)) for p in prompts]

def sleepy(completions, **kwargs):
    time.sleep(3)
    return [1.0 for _ in completions]

async def async_sleepy(completions, **kwargs):
    await asyncio.sleep(3)
    return [1.0]

def broken(completions, **kwargs):
    return [1.0, 2.0]

def positional_only(completions, /):
    return [0.0]

def blind(prompts):
    return [0.0]

def needs_solution(completions, solution):
    return [0.0]
'''


@pytest.fixture
def folder(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(REWARDS)
    rows = [{"id": "r1", "prompt": "What is 2 + 3?", "answer": "5", "split": "train", "level": "easy"},
            {"id": "r2", "prompt": "What is 12 + 13?", "answer": "25", "split": "train", "level": "hard"},
            {"id": "h1", "prompt": "What is 4 + 4?", "answer": "8", "split": "heldout", "level": "easy"}]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _recipe(folder, funcs, weights=None, **extra):
    reward = {"funcs": funcs, **({"weights": weights} if weights else {}), "timeout_s": 1}
    path = folder / "recipe.yaml"
    path.write_text(json.dumps({"tasks": {"sources": [{"path": "rows.jsonl", "license": "MIT"}]}, "reward": reward,
                                "stages": ["eval", "rl", "eval"], **extra}))
    return load_recipe(str(path))


def _play(verifier, task, text):
    env = DatasetEnv(verifier)
    env.reset(task, 0)
    return env.step(text)


def test_components_weights_and_columns(folder):
    recipe = _recipe(folder, ["my_rewards:correct", "my_rewards:shorter"], [1.0, 0.5])
    assert recipe.env.name == "dataset" and recipe.tasks.sources[0].extra_columns == "metadata"
    verifier = install(recipe)
    from tracerl.envs import get_env

    spec = get_env("dataset")
    assert spec.reward_weights == {"correct": 1.0, "shorter": 0.5}
    task = Task(id="r1", source="rows", prompt="What is 2 + 3?", answer="5", metadata={"level": "easy"})
    step = _play(verifier, task, " 5\n")
    # correct: " 5\n".strip() == "5" -> 1.0; shorter: 1 - len(" 5\n") / 10 = 1 - 0.3 = 0.7
    assert step.terminal_reason == TerminalReason.EOS
    assert step.reward_components == pytest.approx({"correct": 1.0, "shorter": 0.7})
    assert step.info["verifier"] == "dataset.reward_funcs" and step.info["verifier_revision"].startswith("rf-")
    # the resolved target is the file's absolute path, so the run's config.yaml names what ran
    assert recipe.reward.funcs[0] == f"{(folder / 'my_rewards.py').resolve()}:correct"


def test_revision_follows_the_source(folder):
    a = resolve_funcs(["my_rewards:correct"])[0]
    (folder / "other.py").write_text(REWARDS.replace("c.strip() == str(a)", "c == str(a)"))
    b = resolve_funcs(["other:correct"])[0]
    assert a.revision != b.revision and len(a.revision) == 12


def test_none_is_not_applicable_and_other_columns_arrive(folder):
    verifier = RewardFuncsVerifier(resolve_funcs(["my_rewards:hard_only", "my_rewards:async_len"]), timeout_s=1,
                                   prompt_of=lambda t: t.prompt)
    easy = Task(id="e", source="s", prompt="abcd", answer="1", metadata={"level": "easy"})
    hard = Task(id="h", source="s", prompt="abcdef", answer="1", metadata={"level": "hard"})
    step = _play(verifier, easy, "x")
    # hard_only returns None for an easy row: no component, named in not_applicable; async_len: len("abcd") = 4
    assert step.reward_components == {"async_len": 4.0}
    assert step.info["not_applicable"] == "hard_only"
    step = _play(verifier, hard, "x")
    assert step.reward_components == {"hard_only": 1.0, "async_len": 6.0} and "not_applicable" not in step.info


@pytest.mark.parametrize("name, why", [("sleepy", "timed out after 0.2 s"), ("async_sleepy", "timed out after 0.2 s"),
                                       ("broken", "returned 2 values for 1 rows")])
def test_a_failed_call_is_an_infra_failure_never_a_zero(folder, name, why):
    verifier = RewardFuncsVerifier(resolve_funcs([f"my_rewards:{name}"]), timeout_s=0.2, prompt_of=lambda t: t.prompt)
    t0 = time.time()
    step = _play(verifier, Task(id="x", source="s", prompt="p", answer="1"), "1")
    assert time.time() - t0 < 2.0  # the deadline holds although the function sleeps 3 s
    assert step.terminated and step.terminal_reason == TerminalReason.INFRA_FAILURE
    assert step.reward_components == {} and why in step.info["infra"]


@pytest.mark.parametrize("target, message", [
    ("nope:correct", "neither a file nope.py"),
    ("my_rewards:missing", "has no function 'missing'"),
    ("my_rewards:positional_only", "positional-only parameter"),
    ("my_rewards:blind", r"takes neither `completions` nor \*\*kwargs"),
    ("correct", "must look like module:function"),
])
def test_bad_functions_fail_in_one_sentence(folder, target, message):
    with pytest.raises(UserError, match=message):
        install(_recipe(folder, [target]))


def test_a_required_column_the_rows_lack_fails_before_any_rollout(folder):
    with pytest.raises(UserError, match=r"requires 'solution'.*field_map"):
        install(_recipe(folder, ["my_rewards:needs_solution"]))


def test_weights_must_match_and_expert_sft_is_refused(folder):
    with pytest.raises(UserError, match="one weight per function"):
        _recipe(folder, ["my_rewards:correct"], [1.0, 2.0])
    with pytest.raises(UserError, match="no scripted expert"):
        _recipe(folder, ["my_rewards:correct"], stages=["sft", "eval", "rl", "eval"])
    with pytest.raises(UserError, match="drop env.name"):
        _recipe(folder, ["my_rewards:correct"], env={"name": "arith"})


def test_the_cli_refuses_an_unknown_module_with_exit_2(folder, capsys):
    from tracerl.cli import main

    _recipe(folder, ["my_rewards:correct"])
    text = (folder / "recipe.yaml").read_text().replace("my_rewards:correct", "my_rewardz:correct")
    (folder / "recipe.yaml").write_text(text)
    assert main(["train", str(folder / "recipe.yaml"), f"run.root={folder / 'runs'}"]) == 2
    assert "my_rewardz" in capsys.readouterr().err
    assert not (folder / "runs").exists()  # nothing written


def test_signature_reading():
    def f(completions, answer=None, **kw):
        return []

    assert check_signature("f", f) == (True, ("completions", "answer"), ("completions",))
    assert call_func(resolve_funcs.__globals__["RewardFunc"]("f", "m:f", lambda completions: [None], "0", False, False,
                                                             ("completions",), ("completions",)),
                     {"completions": ["a"], "answer": ["1"]}, 1, 1.0) == [None]
