"""The real `openai` client against a real gateway: the ids and log-probs it returns are the engine's."""

import math

import torch

from tracerl.envs.calc_json import INSTRUCTIONS, TOOLS
from tracerl.rollout.render import render_prompt


def _engine_sample(gw, prompt, n, seed):
    return gw.engine.generate([prompt], max_new_tokens=n, temperature=1.0, top_p=1.0, top_k=0,
                              stop_strings=gw.stop_strings, stop_token_ids=[gw.tokenizer.eos_token_id],
                              generator=torch.Generator().manual_seed(seed))[0]


def test_chat_returns_the_engines_prompt_ids_sampled_ids_and_logprobs(client, gateway):
    gw, _ = gateway
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 3?"}]
    r = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=12, logprobs=True, seed=7)
    prompt, _ = render_prompt(gw.tokenizer, msgs)
    assert r.model_extra["prompt_token_ids"] == prompt
    want = _engine_sample(gw, prompt, 12, 7)
    choice = r.choices[0]
    assert choice.model_extra["token_ids"] == want.token_ids
    got_lp = [e.logprob for e in choice.logprobs.content]
    assert len(got_lp) == len(want.logprobs) and all(math.isclose(a, b, abs_tol=1e-6) for a, b in zip(got_lp, want.logprobs))
    assert r.usage.prompt_tokens == len(prompt) and r.usage.completion_tokens == len(want.token_ids)
    assert r.model_extra["tracerl"]["policy_version"] == 0


def test_completion_from_token_ids_matches_the_engine(client, gateway):
    gw, _ = gateway
    prompt = render_prompt(gw.tokenizer, [{"role": "user", "content": "Add 4 and 9."}])[0]
    c = client.completions.create(model="tiny", prompt=prompt, max_tokens=10, logprobs=1, seed=3)
    want = _engine_sample(gw, prompt, 10, 3)
    assert c.model_extra["prompt_token_ids"] == prompt
    assert c.choices[0].model_extra["token_ids"] == want.token_ids
    assert all(math.isclose(a, b, abs_tol=1e-6) for a, b in zip(c.choices[0].logprobs.token_logprobs, want.logprobs))
    assert c.choices[0].text == gw.tokenizer.decode(want.token_ids, skip_special_tokens=True)


def test_a_policy_version_tags_later_samples(client, gateway):
    gw, _ = gateway
    gw.set_policy_version(5)
    r = client.completions.create(model="tiny", prompt="Ann has", max_tokens=3)
    assert r.model_extra["tracerl"]["policy_version"] == 5
    assert client.models.list().data[0].model_extra["policy_version"] == 5


def test_tools_render_like_the_environment_so_sft_and_gateway_agree(client, gateway, tiny):
    """An agent sending the calculator schema gets the very prompt ids calc_json's demonstrations start with."""
    spec, tasks, _, tok = tiny
    env = spec.make()
    q = str(tasks[0].prompt)
    r = client.chat.completions.create(model="tiny", max_tokens=2, tools=TOOLS,
                                       messages=[{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": q}])
    assert r.model_extra["prompt_token_ids"] == render_prompt(tok, env.reset(tasks[0], 0))[0]
