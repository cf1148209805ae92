"""A `reward:` recipe with tools (docs/own-data-and-reward.md, "With tools"): a scripted multi-turn episode
checked by hand (the call executed, its result in the TOOL role and never an action, the reward functions
receiving the episode's messages), the refusals (exit 2), and 2-step RL runs in sync and async mode."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tracerl.contract.roles import TerminalReason, TokenRole
from tracerl.errors import UserError

TOOLS = '''
import time


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: The first factor.
        b: The second factor.
    """
    return a * b


def slow(x: int) -> int:
    """Wait, then echo.

    Args:
        x: A number.
    """
    time.sleep(3)
    return x


def python(code: str) -> str:
    """Run a Python program in the sandbox and return what it prints.

    Args:
        code: The program.
    """
    return code


async def aecho(x: int) -> int:
    """Echo, asynchronously.

    Args:
        x: A number.
    """
    return x + 1


def untyped(a):
    """No type hint."""
    return a
'''

REWARDS = '''
import os

SEEN = []
LOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.log")


def final_answer(completions, answer, **kwargs):
    SEEN.append({"completions": completions, **kwargs})
    return [float(c[-1]["content"].strip() == str(a)) for c, a in zip(completions, answer)]


def messages_seen(completions, tool_calls, messages):
    with open(LOG, "a") as f:
        f.write(f"{os.getpid()}\\n")
    return [float(len(c)) for c in completions]
'''

ROWS = [{"id": "m1", "prompt": "What is 12 * 34?", "answer": "408", "split": "train"},
        {"id": "m2", "prompt": "What is 11 * 11?", "answer": "121", "split": "train"}]
CALL = '<tool_call>\n{"name": "multiply", "arguments": {"a": 12, "b": 34}}\n</tool_call>'
TINY = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64, "vocab_size": 320,
        "individual_digits": True}


def _folder(tmp_path, monkeypatch, **reward):
    (tmp_path / "ttools.py").write_text(TOOLS)
    (tmp_path / "trewards.py").write_text(REWARDS)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    recipe = {
        "run": {"seed": 0, "progress": False, "threads": 1, "root": str(tmp_path / "runs")},
        "model": {"chat_template": "hermes", "tiny": TINY},
        "tasks": {"sources": [{"path": "rows.jsonl", "license": "MIT"}]},
        "reward": {"funcs": ["trewards:final_answer", "trewards:messages_seen"], "tools": ["ttools:multiply"],
                   "timeout_s": 0.5, **reward},
        "env": {"max_turns": 3, "max_tokens": 200, "max_new_tokens": 24},
        "rl": {"steps": 2, "prompts_per_step": 2, "group_size": 2, "eval_every": 0, "checkpoint_every": 0},
        "stages": ["rl"]}
    (tmp_path / "recipe.yaml").write_text(json.dumps(recipe))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _installed(tmp_path, monkeypatch, overrides=(), **reward):
    from tracerl.config import load_recipe
    from tracerl.envs.dataset import install

    folder = _folder(tmp_path, monkeypatch, **reward)
    recipe = load_recipe(str(folder / "recipe.yaml"), list(overrides))
    install(recipe, [folder])
    return recipe


class Scripted:
    """An engine that 'samples' fixed texts, one per turn (a final answer ends with the end-of-turn token)."""

    def __init__(self, tok, script):
        self.tokenizer, self.script, self.turn, self.returned = tok, script, 0, []

    def generate(self, prompts, **kw):
        from tracerl.rollout.sampling import Sample

        text = self.script[min(self.turn, len(self.script) - 1)]
        self.turn += 1
        ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        call = text.endswith("</tool_call>")
        ids = ids if call else ids + [self.tokenizer.eos_token_id]
        self.returned.append(ids)
        return [Sample(ids, [-0.5] * len(ids), "stop") for _ in prompts]


def _play(recipe, script, parser="hermes"):
    from tracerl.envs import get_env
    from tracerl.envs.native_tools import native_spec
    from tracerl.models.chat_templates import HERMES_TEMPLATE
    from tracerl.models.tiny import build_tokenizer
    from tracerl.rollout import LoopBudgets, run_episodes
    from tracerl.tasks.sources import load_source

    spec = native_spec(get_env("dataset"), "native", parser)
    native = spec.make().native_tools
    tok = build_tokenizer([r["prompt"] for r in ROWS] + [CALL, native.tools_text()], vocab_size=300,
                          tags=spec.special_tokens)
    tok.chat_template = HERMES_TEMPLATE
    task = load_source(recipe.tasks.sources[0]).tasks[0]
    engine = Scripted(tok, script)
    (traj,) = run_episodes(engine, spec, [task], ["g"], budgets=LoopBudgets.from_env(recipe.env),
                           sampling={"temperature": 1.0, "top_p": 1.0, "top_k": 0}, policy_version=3, seed=0)
    return traj, tok, engine


def _observations(traj, tok):
    return [tok.decode(traj.token_ids[s.start:s.end]) for s in traj.spans if s.kind == "observation"]


def test_scripted_episode_calls_the_tool_and_scores_the_messages(tmp_path, monkeypatch):
    recipe = _installed(tmp_path, monkeypatch)
    assert recipe.env.tool_format == "native" and recipe.reward.tools[0].endswith("ttools.py:multiply")
    traj, tok, engine = _play(recipe, [CALL, "408"])
    assert traj.terminal_reason == TerminalReason.EOS
    # the call ran in-process: 12 * 34 = 408, fed back in the tool role
    assert _observations(traj, tok) == ["408"]
    (span,) = [s for s in traj.spans if s.kind == "observation"]
    assert span.tool_name == "multiply" and span.tool_status == "ok"
    assert all(traj.roles[i] == TokenRole.OBSERVATION for i in range(span.start, span.end))
    # the actions are exactly the scripted ids; nothing the harness added (the tool turn) is an action
    actions = [t for t, r in zip(traj.token_ids, traj.roles) if r == TokenRole.ACTION]
    assert actions == engine.returned[0] + engine.returned[1]
    # the tool turn as the template renders it: <|im_end|> + tool header + result + next assistant header
    text = tok.decode(traj.token_ids, skip_special_tokens=False)
    assert CALL + "<|im_end|>\n<|im_start|>tool\n<tool_response>\n408\n</tool_response><|im_end|>\n" \
        "<|im_start|>assistant\n408" in text
    # final_answer = 1.0 (408 is the answer); messages_seen = 3 messages (call, tool result, answer)
    assert traj.reward_components == {"final_answer": 1.0, "messages_seen": 3.0} and traj.reward == 4.0
    mod = next(m for n, m in sys.modules.items() if n.startswith("tracerl_user_rewards_")
               and str(tmp_path) in (getattr(m, "__file__", None) or "") and hasattr(m, "SEEN"))
    (call,) = mod.SEEN
    call_msg = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "multiply", "arguments": {"a": 12, "b": 34}}}]}
    completion = [call_msg, {"role": "tool", "name": "multiply", "content": "408"},
                  {"role": "assistant", "content": "408"}]
    assert call["completions"] == [completion] and call["prompts"] == ["What is 12 * 34?"]
    assert call["tool_calls"] == [[{"name": "multiply", "arguments": {"a": 12, "b": 34}, "result": "408", "status": "ok"}]]
    assert call["messages"] == [[{"role": "user", "content": "What is 12 * 34?"}, *completion]]
    assert traj.verifier_name == "dataset.reward_funcs"
    assert "+tools-" in traj.env_revision


def test_malformed_call_timeout_and_max_turns(tmp_path, monkeypatch):
    recipe = _installed(tmp_path, monkeypatch, ["env.max_tokens=2000"], tools=["ttools:multiply", "ttools:slow"])
    bad = '<tool_call>\n{"name": "multiply", "arguments": {"a": }\n</tool_call>'
    slow = '<tool_call>\n{"name": "slow", "arguments": {"x": 1}}\n</tool_call>'
    traj, tok, _ = _play(recipe, [bad, slow, CALL])
    # three call turns = env.max_turns: truncated, and the reward functions are not called
    assert traj.terminal_reason == TerminalReason.MAX_TURNS and traj.truncated
    obs = _observations(traj, tok)
    assert obs[0].startswith("invalid_action: tool call is not JSON")
    assert obs[1] == "timeout: tool slow ran past 0.5 s"  # reward.timeout_s bounds a tool call
    assert obs[2] == "408"  # the third call ran (12 * 34); then the turns were spent
    assert [s.tool_status for s in traj.spans if s.kind == "observation"] == ["invalid_action", "timeout", "ok"]


def test_code_tool_runs_its_program_in_the_sandbox(tmp_path, monkeypatch):
    recipe = _installed(tmp_path, monkeypatch, tools=[], code_tools=["ttools:python"])
    assert recipe.reward.code_tools[0].endswith("ttools.py:python") and recipe.reward.tools == []
    code = '<tool_call>\n{"name": "python", "arguments": {"code": "print(12 * 34)"}}\n</tool_call>'
    traj, tok, _ = _play(recipe, [code, "408"])
    assert _observations(traj, tok) == ["408"] and traj.reward_components["final_answer"] == 1.0


def test_an_async_tool_is_awaited(tmp_path, monkeypatch):
    from tracerl.envs.dataset.tools import native_tools, resolve_tools
    from tracerl.envs.native_tools import ToolCall

    _folder(tmp_path, monkeypatch)
    tools = native_tools(resolve_tools(["ttools:aecho"], search=[tmp_path]), "hermes", 0.5).tools
    step = tools.execute(ToolCall("aecho", {"x": 41}))
    assert step.observation == "42" and step.info["tool_status"] == "ok"  # 41 + 1
    assert tools.execute(ToolCall("aecho", {"y": 1})).info["invalid_action"]  # the signature still binds


@pytest.mark.parametrize("reward, env, match", [
    ({"tools": ["multiply"]}, {}, "reward.tools entry 'multiply' must look like module:function"),
    ({"tools": ["ttools:divide"]}, {}, "has no tool 'divide'; it defines aecho, multiply, python, slow, untyped"),
    ({"tools": ["nosuch:f"]}, {}, "tool module 'nosuch' is neither .* fix the name in reward.tools"),
    ({"tools": ["ttools:untyped"]}, {}, "tool 'ttools:untyped' cannot give a JSON schema"),
    ({"tools": ["ttools:multiply"], "code_tools": ["ttools:multiply"]}, {}, "name two tools alike"),
    ({"stop_strings": ["\n"]}, {}, "stop_strings entry '\\\\n' occurs inside a hermes tool call"),
    ({}, {"tool_format": "grammar"}, "env.tool_format: grammar does not apply"),
    ({"tools": []}, {}, "reward function 'messages_seen' requires 'tool_calls', 'messages', which the task rows"),
    ({"tools": []}, {"tool_format": "native"}, "env.tool_format: native in a reward: recipe needs tools"),
])
def test_bad_tools_are_refused_in_one_sentence(tmp_path, monkeypatch, reward, env, match):
    from tracerl.config import load_recipe
    from tracerl.envs.dataset import install

    folder = _folder(tmp_path, monkeypatch, **reward)
    raw = json.loads((folder / "recipe.yaml").read_text())
    raw["env"].update(env)
    (folder / "recipe.yaml").write_text(json.dumps(raw))
    with pytest.raises((UserError, ValueError), match=match):
        install(load_recipe(str(folder / "recipe.yaml"), []), [folder])


def test_a_template_without_tool_support_is_refused_at_run_start(tmp_path, monkeypatch):
    """The tiny model's own ChatML template ignores `tools` and `tool_calls`: the run-start check refuses it."""
    from tracerl.models.tiny import build_tokenizer
    from tracerl.run.multienv import resolve_routes
    from tracerl.run.tool_setup import prepare_tokenizer

    recipe = _installed(tmp_path, monkeypatch, ["model.chat_template=auto"])
    routes = resolve_routes(recipe)
    tok = build_tokenizer([r["prompt"] for r in ROWS], vocab_size=300, tags=routes[0].spec.special_tokens)
    assert "<|im_start|>" in tok.chat_template and "tool_calls" not in tok.chat_template
    with pytest.raises(UserError, match="env 'dataset' in native tool mode: the chat template with env.tool_parser "
                                        "hermes drops the assistant's tool_calls"):
        prepare_tokenizer(recipe, None, tok, routes)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("overrides", [[], ["rl.mode=async", "rl.max_staleness=1"],
                                       pytest.param(["run.backend=ray"], marks=pytest.mark.slow)],  # ~17 s
                         ids=["sync", "async", "ray"])
def test_two_rl_steps_with_tools_store_the_rewards(tmp_path, monkeypatch, overrides):
    import tracerl
    from tracerl.store import Store

    if "run.backend=ray" in overrides:
        pytest.importorskip("ray")
    folder = _folder(tmp_path, monkeypatch)
    run = tracerl.train("recipe.yaml", *overrides)
    store = Store(run.run_dir / "store.sqlite")
    trajs = [t for s in (1, 2) for t in store.trajectories(stage="rl", step=s)]
    assert len(trajs) == 2 * 2 * 2  # 2 steps x 2 prompts x group 2
    for t in trajs:
        assert "+tools-" in t.env_revision and t.verifier_name == "dataset.reward_funcs"
        assert set(t.reward_components) == {"final_answer", "messages_seen"}
        n_obs = sum(s.kind == "observation" for s in t.spans)
        if t.terminal_reason == TerminalReason.EOS:  # scored: one assistant + one tool message per call turn, + the answer
            assert t.reward_components["messages_seen"] == 1 + 2 * n_obs
        else:  # a truncation (max turns / tokens) is not scored
            assert t.truncated and t.reward_components["messages_seen"] == 0.0
    pids = set((folder / "calls.log").read_text().split()) if (folder / "calls.log").exists() else set()
    scored = [t for t in trajs if t.terminal_reason == TerminalReason.EOS]
    assert scored and pids  # the untrained policy (seed 0) ends some episodes itself: those are scored
    if overrides:  # async / Ray: the functions ran in the worker, not here
        assert str(os.getpid()) not in pids


def _in_worker(ref):
    from tracerl.envs.native_tools import ToolCall

    spec = ref.build()  # what an async / Ray rollout worker does before it plays
    step = spec.make().native_tools.tools.execute(ToolCall("multiply", {"a": 12, "b": 34}))
    return os.getpid(), step.observation, spec.revision


def test_a_spawned_worker_imports_the_tools(tmp_path, monkeypatch):
    import multiprocessing

    from tracerl.envs import get_env
    from tracerl.envs.native_tools import native_spec
    from tracerl.rollout.workers import SpecRef

    recipe = _installed(tmp_path, monkeypatch)
    ref = SpecRef.for_recipe(recipe)
    assert ref.tool_parser == "hermes" and ref.reward["tools"][0].endswith("ttools.py:multiply")
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        pid, obs, revision = pool.apply(_in_worker, (ref,))
    assert pid != os.getpid() and obs == "408"  # 12 * 34, computed in the worker
    assert revision == native_spec(get_env("dataset"), "native", "hermes").revision  # the same tools' hash


def test_the_tools_example_runs(tmp_path, monkeypatch):
    """`cd examples/own_reward && tracerl train recipe_tools.yaml`, shrunk: native SFT rows, eval, RL, eval."""
    import shutil
    from pathlib import Path

    import tracerl
    from tracerl.store import Store

    example = Path(__file__).resolve().parents[2] / "examples" / "own_reward"
    for name in ("recipe_tools.yaml", "rewards.py", "tools.py", "mult.jsonl", "demos_tools.jsonl"):
        shutil.copy(example / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    run = tracerl.train("recipe_tools.yaml", "sft.epochs=1", rl={"steps": 1, "prompts_per_step": 2, "group_size": 2},
                        **{"model.tiny": TINY, "eval.tasks": 4, "eval.samples": 1, "eval.k": [1],
                           "rl.checkpoint_every": 0, "run.root": str(tmp_path / "runs")})
    assert [row["after"] for row in run.heldout] == ["sft", "rl"]
    (t, *_) = Store(run.run_dir / "store.sqlite").trajectories(stage="rl", step=1)
    assert "+tools-" in t.env_revision and set(t.reward_components) == {"final_answer"}
