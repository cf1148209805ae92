"""Every built-in environment of the suite through the real agent loop, with a scripted engine that
replays expert actions: trajectories validate, the env's ending is kept, and the loop's turn and
token budgets end episodes with the right reason."""

import random

import pytest

from tracerl.contract.roles import TerminalReason, TokenRole
from tracerl.envs import get_env
from tracerl.models.tiny import build_tokenizer
from tracerl.rollout.agent_loop import LoopBudgets, run_episodes
from tracerl.rollout.engine import Sample
from tracerl.rollout.render import render_prompt

ENVS = ["search_qa", "text_world", "workplace_db", "code_tests", "reasoning_gym"]


def expert_actions(spec, task, seed=0):
    env, obs, actions, rng = spec.make(), [], [], random.Random(seed)
    msgs = env.reset(task, 0)
    for _ in range(20):
        actions.append(spec.expert(task, obs, rng, error_rate=0.0))
        step = env.step(actions[-1])
        if step.terminated:
            return msgs, actions, step
        obs.append(step.observation)
    raise AssertionError("expert did not finish")


class ScriptedEngine:
    """Plays fixed actions per episode; an episode is recognised by its rendered prompt prefix."""

    def __init__(self, tokenizer, scripts):
        self.tokenizer, self.scripts, self.turn = tokenizer, scripts, {}

    def generate(self, prompts, *, max_new_tokens, **kwargs):
        limits = max_new_tokens if isinstance(max_new_tokens, list) else [max_new_tokens] * len(prompts)
        out = []
        for ids, limit in zip(prompts, limits):
            key = next(k for k in self.scripts if tuple(ids[: len(k)]) == k)
            n = self.turn.get(key, 0)
            self.turn[key] = n + 1
            toks = self.tokenizer(self.scripts[key][n], add_special_tokens=False)["input_ids"][:limit]
            out.append(Sample(list(toks), [-0.5] * len(toks), "stop" if len(toks) < limit else "length"))
        return out


def setup(name, n=3):
    if name == "reasoning_gym":
        pytest.importorskip("reasoning_gym")
    spec = get_env(name)
    tasks = spec.generate("train", n, seed=0, difficulty=1.0)
    plays = [expert_actions(spec, t) for t in tasks]
    texts = [m["content"] for msgs, _, _ in plays for m in msgs] + [a for _, acts, _ in plays for a in acts]
    tok = build_tokenizer(texts, vocab_size=400, tags=spec.special_tokens)
    return spec, tasks, plays, tok


def run(spec, tasks, plays, tok, budgets):
    scripts = {tuple(render_prompt(tok, msgs)[0]): acts for msgs, acts, _ in plays}
    engine = ScriptedEngine(tok, scripts)
    return run_episodes(engine, spec, tasks, [f"g{i}" for i in range(len(tasks))], budgets=budgets,
                        sampling={"temperature": 1.0, "top_p": 1.0, "top_k": 0}, policy_version=0, seed=0)


@pytest.mark.parametrize("name", ENVS)
def test_expert_episodes_validate_and_keep_the_envs_ending(name):
    spec, tasks, plays, tok = setup(name)
    trajs = run(spec, tasks, plays, tok, LoopBudgets(max_turns=20, max_tokens=4000, max_new_tokens=200))
    for traj, (_, actions, last) in zip(trajs, plays):
        assert traj.terminal_reason == last.terminal_reason and not traj.truncated
        assert traj.reward == pytest.approx(1.0)
        n_obs = sum(1 for r in traj.roles if r == TokenRole.OBSERVATION)
        assert (n_obs > 0) == (len(actions) > 1)
        # telemetry counts a tool call by its status and an invalid action by "invalid_action"
        statuses = [s.tool_status for s in traj.spans if s.kind == "observation"]
        assert len(statuses) == len(actions) - 1 and all(st == "ok" for st in statuses), statuses


@pytest.mark.parametrize("name", ["search_qa", "text_world", "workplace_db", "code_tests"])
def test_turn_and_token_budgets(name):
    spec, tasks, plays, tok = setup(name, n=2)
    trajs = run(spec, tasks, plays, tok, LoopBudgets(max_turns=1, max_tokens=4000, max_new_tokens=200))
    assert all(t.terminal_reason == TerminalReason.MAX_TURNS and t.truncated for t in trajs)
    assert all(t.reward == 0.0 for t in trajs)
    prompt_len = max(len(render_prompt(tok, msgs)[0]) for msgs, _, _ in plays)
    trajs = run(spec, tasks, plays, tok, LoopBudgets(max_turns=20, max_tokens=prompt_len + 12, max_new_tokens=200))
    assert all(t.terminal_reason == TerminalReason.MAX_TOKENS and t.truncated for t in trajs)

