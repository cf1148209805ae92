"""Observations go through the chat template's tool role when it has one, and the token-in/token-out
rule holds: the policy's sampled ids are kept as sampled, each observation piece is tokenized on its
own, and the wrapper text the template adds around a tool turn is TEMPLATE, never ACTION."""

import copy

from tracerl.contract import TokenRole, validate
from tracerl.rollout import LoopBudgets, run_episodes
from tracerl.rollout.render import render_observation, tool_role_wrap

from .test_agent_loop import SAMPLING, EchoSandbox, ScriptedEngine, _spec

TOOL_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'tool' %}<|im_start|>tool\n{{ m['content'] }}<|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _with_tool_role(tok):
    tok = copy.deepcopy(tok)
    tok.chat_template = TOOL_TEMPLATE
    if hasattr(tok, "_tracerl_tool_wrap"):
        del tok._tracerl_tool_wrap
    return tok


def test_generic_template_keeps_observations_inline(tiny):
    _, tok = tiny
    assert tool_role_wrap(tok) is None  # the tiny model's template never names a tool role
    ids, roles = render_observation(tok, "<output>4</output>")
    assert ids == tok("<output>4</output>", add_special_tokens=False)["input_ids"]
    assert set(roles) == {TokenRole.OBSERVATION}


def test_tool_role_wraps_the_observation_in_template_tokens(tiny):
    tok = _with_tool_role(tiny[1])
    assert tool_role_wrap(tok) == ("<|im_end|>\n<|im_start|>tool\n", "<|im_end|>\n<|im_start|>assistant\n")
    ids, roles = render_observation(tok, "<output>4</output>")
    body = tok("<output>4</output>", add_special_tokens=False)["input_ids"]
    before = tok("<|im_end|>\n<|im_start|>tool\n", add_special_tokens=False)["input_ids"]
    after = tok("<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    assert ids == before + body + after  # each piece tokenized on its own, then appended
    assert roles == [TokenRole.TEMPLATE] * len(before) + [TokenRole.OBSERVATION] * len(body) + [TokenRole.TEMPLATE] * len(after)


def test_episode_through_the_tool_role_keeps_the_contract(tiny):
    model, tok = tiny[0], _with_tool_role(tiny[1])
    spec = _spec(EchoSandbox())
    task = spec.generate("train", 1, 0)[0]
    engine = ScriptedEngine(model, tok, [f"<code>{task.metadata['program']}</code>", f"<answer>{task.answer}</answer>"])
    (traj,) = run_episodes(engine, spec, [task], ["g"], budgets=LoopBudgets(), sampling=SAMPLING,
                           policy_version=3, seed=0)
    validate(traj)
    assert traj.reward == 1.0
    actions = [traj.token_ids[i] for i, r in enumerate(traj.roles) if r == TokenRole.ACTION]
    assert actions == [t for ids in engine.returned for t in ids]  # token in, token out
    (obs,) = [s for s in traj.spans if s.kind == "observation"]
    # the span covers the observation proper; the tool-turn wrapper around it is TEMPLATE
    assert tok.decode(traj.token_ids[obs.start:obs.end]) == f"<output>{task.answer}</output>"
    before = tok.decode(traj.token_ids[obs.start - 6:obs.start])
    assert before.endswith("<|im_start|>tool\n")
    assert {traj.roles[i] for i in range(obs.end, obs.end + 3)} == {TokenRole.TEMPLATE}
    wrapped = tok.decode(traj.token_ids[obs.end:]).startswith("<|im_end|>\n<|im_start|>assistant\n")
    assert wrapped
