"""The OpenAI surface agent frameworks use by default, with the official `openai` client against a real
gateway: streaming, n > 1 with top log-probs, tool_choice / response_format by constrained decoding,
the Responses API; every sample recorded as a span with its token ids, log-probs and policy version."""

import json
import math

import httpx
import openai
import pytest

from tracerl.envs.json_tools import format_tool_call

TOOLS = [{"type": "function", "function": {"name": "calculator", "description": "Evaluate an expression.",
                                           "parameters": {"type": "object",
                                                          "properties": {"expression": {"type": "string"}}}}}]
MSGS = [{"role": "user", "content": "Ann has 3 coins and finds 4 more. How many?"}]


def _spans(gw, eid):
    return gw.registry.get(eid).calls


def _episode(srv, eid):
    assert httpx.post(srv.base_url + "/episodes", json={"episode_id": eid}, timeout=30).status_code == 200
    return {"X-Episode-Id": eid}


def test_streamed_chat_with_a_tool_call_is_one_recorded_span(scripted):
    gw, srv, client = scripted([format_tool_call("calculator", {"expression": "3+4"})])
    stream = client.chat.completions.create(model="tiny", messages=MSGS, tools=TOOLS, stream=True, logprobs=True,
                                            stream_options={"include_usage": True}, extra_headers=_episode(srv, "s1"))
    chunks = list(stream)
    calls, finish = {}, None
    for ch in chunks:
        for c in ch.choices:
            for tc in c.delta.tool_calls or []:
                entry = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
                entry["id"] = tc.id or entry["id"]
                entry["name"] += (tc.function.name or "") if tc.function else ""
                entry["arguments"] += (tc.function.arguments or "") if tc.function else ""
            finish = c.finish_reason or finish
    assert finish == "tool_calls" and len(calls) == 1
    assert calls[0]["name"] == "calculator" and json.loads(calls[0]["arguments"]) == {"expression": "3+4"}
    assert chunks[-1].usage is not None and chunks[-1].choices == []  # stream_options.include_usage
    (span,) = _spans(gw, "s1")
    assert calls[0]["id"] == f"call_{span.span_id}_0"
    assert span.completion_ids == gw.tokenizer(format_tool_call("calculator", {"expression": "3+4"}),
                                               add_special_tokens=False)["input_ids"]
    assert chunks[-1].usage.completion_tokens == len(span.completion_ids) and span.logprobs == [-0.5] * len(span.logprobs)


def test_streamed_text_joins_to_the_sampled_text(client, gateway):
    gw, srv = gateway
    pieces, lps = [], []
    for ch in client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=12, stream=True, logprobs=True,
                                             seed=3, extra_headers=_episode(srv, "s2")):
        for c in ch.choices:
            pieces.append(c.delta.content or "")
            lps += [e.logprob for e in (c.logprobs.content if c.logprobs else None) or []]
    (span,) = _spans(gw, "s2")
    assert "".join(pieces) == span.text and lps == span.logprobs and len(span.completion_ids) > 0
    text = "".join(c.choices[0].text for c in client.completions.create(model="tiny", prompt="Ann", max_tokens=6,
                                                                       seed=3, stream=True) if c.choices)
    assert text == client.completions.create(model="tiny", prompt="Ann", max_tokens=6, seed=3).choices[0].text


def test_n4_with_top_logprobs_is_four_spans_of_one_batch(client, gateway):
    gw, srv = gateway
    batches = gw.worker.batches
    r = client.chat.completions.create(model="tiny", messages=MSGS, n=4, max_tokens=10, logprobs=True, top_logprobs=3,
                                       seed=7, extra_headers=_episode(srv, "n4"))
    assert gw.worker.batches == batches + 1  # the four rows were one engine batch
    spans = _spans(gw, "n4")
    assert [c.index for c in r.choices] == [0, 1, 2, 3] and len({s.span_id for s in spans}) == 4
    assert len({tuple(s.completion_ids) for s in spans}) > 1  # four samples, not one sample four times
    for choice, span in zip(r.choices, spans):
        assert choice.model_extra["token_ids"] == span.completion_ids and span.policy_version == 0
        assert [e.logprob for e in choice.logprobs.content] == span.logprobs
        for e, tok, top in zip(choice.logprobs.content, span.completion_ids, span.top_logprobs):
            tops = [t.logprob for t in e.top_logprobs]
            assert tops == [v for _, v in top] and len(tops) == 3 and tops == sorted(tops, reverse=True)
            assert sum(math.exp(t) for t in tops) <= 1 + 1e-5
            match = [v for t, v in top if t == tok]
            if match:  # the rescored distribution is the one sampled from: the same log-prob
                assert abs(match[0] - e.logprob) < 1e-3
            else:
                assert e.logprob <= tops[-1] + 1e-3
    one = client.chat.completions.create(model="tiny", messages=MSGS, max_tokens=10, seed=7)
    assert one.choices[0].model_extra["token_ids"] == spans[0].completion_ids  # row 0 of a seeded n=4 is n=1's sample
    c = client.completions.create(model="tiny", prompt="Ann", n=2, max_tokens=5, logprobs=2, seed=1)
    assert len(c.choices) == 2 and all(len(t) <= 2 for t in c.choices[0].logprobs.top_logprobs)


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "calculator"}}])
def test_tool_choice_forces_a_parseable_call_on_an_untrained_model(client, gateway, choice):
    gw, srv = gateway
    tools = TOOLS + [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    r = client.chat.completions.create(model="tiny", messages=MSGS, tools=tools, tool_choice=choice, n=3,
                                       max_tokens=40, extra_headers=_episode(srv, "tc"))
    spans = _spans(gw, "tc")
    for c, span in zip(r.choices, spans):
        assert c.finish_reason == "tool_calls" and len(c.message.tool_calls) == 1, c.message
        fn = c.message.tool_calls[0].function
        assert fn.name in ({"calculator", "search"} if choice == "required" else {"calculator"})
        assert isinstance(json.loads(fn.arguments), dict)
        assert span.sampling["constraint"] == "tool_call" and all(lp <= 0 for lp in span.logprobs)
        assert span.completion_ids and len(span.logprobs) == len(span.completion_ids)


def test_tool_choice_none_and_json_object_are_enforced(client, gateway):
    gw, srv = gateway
    for _ in range(3):
        r = client.chat.completions.create(model="tiny", messages=MSGS, tools=TOOLS, tool_choice="none", max_tokens=24)
        assert "<tool_call>" not in r.choices[0].message.content and not r.choices[0].message.tool_calls
    r = client.chat.completions.create(model="tiny", messages=MSGS, response_format={"type": "json_object"}, n=3,
                                       max_tokens=16)
    for c in r.choices:
        assert isinstance(json.loads(c.message.content), dict), c.message.content
    with pytest.raises(openai.BadRequestError, match="json_schema"):
        client.chat.completions.create(model="tiny", messages=MSGS, response_format={
            "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}})
    with pytest.raises(openai.BadRequestError, match="not among"):
        client.chat.completions.create(model="tiny", messages=MSGS, tools=TOOLS,
                                       tool_choice={"type": "function", "function": {"name": "nope"}})


def test_responses_api_with_a_tool_extends_its_episode_token_for_token(client, gateway):
    gw, srv = gateway
    tools = [{"type": "function", "name": "calculator", "parameters": TOOLS[0]["function"]["parameters"]}]
    headers = _episode(srv, "resp")
    r = client.responses.create(model="tiny", instructions="Use the calculator.", input=MSGS[0]["content"], tools=tools,
                                tool_choice="required", max_output_tokens=40, extra_headers=headers)
    calls = [o for o in r.output if o.type == "function_call"]
    assert r.status == "completed" and len(calls) == 1 and calls[0].name == "calculator"
    follow = [*(o.model_dump(exclude_none=True) for o in r.output),
              {"type": "function_call_output", "call_id": calls[0].call_id, "output": "7"}]
    events = list(client.responses.create(model="tiny", instructions="Use the calculator.",
                                          input=[{"role": "user", "content": MSGS[0]["content"]}, *follow], tools=tools,
                                          max_output_tokens=12, stream=True, extra_headers=headers))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] in ("response.completed",
                                                                                        "response.incomplete")
    assert "response.output_item.added" in kinds and "response.output_item.done" in kinds
    first, second = _spans(gw, "resp")
    assert second.extends_span == first.span_id  # the tool result was appended to the sampled ids, not re-rendered
    assert second.prompt_ids[:len(first.prompt_ids) + len(first.completion_ids)] == first.prompt_ids + first.completion_ids
    assert events[-1].response.model_extra["token_ids"] == second.completion_ids
    out = httpx.post(srv.base_url + "/episodes/resp/finish", json={"reward": 1.0}, timeout=30).json()
    assert out["trajectories"] == 1 and out["merges"] == 1
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        client.responses.create(model="tiny", input="hi", previous_response_id=r.id)
    with pytest.raises(openai.BadRequestError, match="unrecognized request argument 'max_toolcalls'"):
        client.responses.create(model="tiny", input="hi", extra_body={"max_toolcalls": 1})  # a typo is not ignored


def test_agents_sdk_default_model_and_run_streamed_go_through_the_gateway(gateway):
    pytest.importorskip("agents")
    import sys
    from pathlib import Path

    gw, srv = gateway
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "gateway_agent"))
    import sdk_agent

    _episode(srv, "sdk")
    answer = sdk_agent.run_episode(srv.base_url, "tiny", "Ann has 3 coins and finds 4 more. How many?", "sdk")
    spans = _spans(gw, "sdk")
    assert [s.kind for s in spans] == ["chat"] * len(spans)  # /v1/responses calls, recorded as the chat route does
    assert isinstance(answer, str) and spans and all(s.completion_ids and len(s.logprobs) == len(s.completion_ids)
                                                     for s in spans)
    from agents.models.openai_provider import OpenAIProvider
    from agents.models.openai_responses import OpenAIResponsesModel

    assert isinstance(OpenAIProvider(openai_client=openai.AsyncOpenAI(base_url=srv.base_url, api_key="x"))
                      .get_model("tiny"), OpenAIResponsesModel)  # the SDK's default model class


def test_agents_sdk_agent_calls_the_tool_and_its_turns_merge_into_one_trajectory(scripted):
    """A scripted policy (a tool call, then an answer): the SDK runs the tool, sends the result back
    through the Responses API, and the gateway extends the first call's ids with it (one trajectory)."""
    pytest.importorskip("agents")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "gateway_agent"))
    import sdk_agent

    gw, srv, _ = scripted([format_tool_call("calculator", {"expression": "3+4"}), "<answer>7</answer>"])
    _episode(srv, "sdk2")
    answer = sdk_agent.run_episode(srv.base_url, "tiny", "Ann has 3 coins and finds 4 more. How many?", "sdk2")
    assert "7" in answer
    first, second = _spans(gw, "sdk2")
    assert first.finish_reason == "tool_calls" and second.extends_span == first.span_id
    out = httpx.post(srv.base_url + "/episodes/sdk2/finish", json={"reward": 1.0}, timeout=30).json()
    assert out["trajectories"] == 1 and out["merges"] == 1 and out["splits"] == 0
    traj = gw.registry.get("sdk2").trajectories[0]
    tool_ids = gw.tokenizer("7", add_special_tokens=False)["input_ids"]
    assert traj.token_ids[:len(first.prompt_ids) + len(first.completion_ids)] == first.prompt_ids + first.completion_ids
    assert any(traj.token_ids[i:i + len(tool_ids)] == tool_ids for i in range(len(first.prompt_ids), len(traj.token_ids)))
