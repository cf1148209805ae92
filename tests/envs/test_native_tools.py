"""Native tool calls (docs/tools.md): parsers, schemas from callables, the template conformance check, SFT
from OpenAI `tool_calls` rows, and a 2-step native math_tool run on the tiny model."""

from __future__ import annotations

import json

import pytest

from tracerl.contract.roles import TokenRole
from tracerl.envs.native_tools import NativeTools, ToolCall, ToolSet, get_parser, tool_schema
from tracerl.models.chat_templates import HERMES_TEMPLATE
from tracerl.models.tiny import build_tokenizer
from tracerl.rollout.tool_turns import check_conformance, render_tool_turn, tool_wrap

CALL = ToolCall("python", {"code": "print(6*7)"})


def test_hermes_parser_reads_calls_and_reports_malformed_json():
    p = get_parser("hermes")
    text = '<tool_call>\n{"name": "python", "arguments": {"code": "print(6*7)"}}\n</tool_call>'
    assert p.format_calls([CALL]) == text
    assert p.parse(text).calls == (CALL,) and not p.parse(text).error
    args_as_string = '<tool_call>{"name": "python", "arguments": "{\\"code\\": \\"print(6*7)\\"}"}</tool_call>'
    assert p.parse(args_as_string).calls == (CALL,)
    bad = p.parse('<tool_call>\n{"name": "python", "arguments": {"code": }\n</tool_call>')
    assert bad.calls == () and bad.error.startswith("tool call is not JSON")
    assert "not closed" in p.parse('<tool_call>{"name": "python"').error
    assert p.parse("42") == p.parse(" 42 ") and p.parse("42").calls == () and p.parse("42").content == "42"
    assert "string \"name\"" in p.parse('<tool_call>{"arguments": {}}</tool_call>').error


def test_llama3_parser_whole_turn_json():
    p = get_parser("llama3")
    text = '{"name": "python", "parameters": {"code": "print(6*7)"}}'
    assert p.format_calls([CALL]) == text and p.parse(text).calls == (CALL,)
    assert p.parse('<|python_tag|>{"name": "python", "arguments": {"code": "print(6*7)"}}').calls == (CALL,)
    assert p.parse("The answer is 42.").calls == () and p.parse("The answer is 42.").content == "The answer is 42."
    bad = p.parse('{"name": "python", "parameters": {"code": "x"')
    assert bad.calls == () and "not JSON" in bad.error
    assert "must be a JSON object" in p.parse('{"name": "python", "parameters": [1]}').error


def test_mistral_parser_list_of_calls():
    p = get_parser("mistral")
    two = [CALL, ToolCall("search", {"q": "x"})]
    text = p.format_calls(two)
    assert text == '[TOOL_CALLS][{"name": "python", "arguments": {"code": "print(6*7)"}}, {"name": "search", "arguments": {"q": "x"}}]'
    assert p.parse(text).calls == tuple(two)
    assert p.parse("[TOOL_CALLS][{\"name\": \"python\"").error.startswith("tool call is not JSON")
    assert "JSON list" in p.parse('[TOOL_CALLS]{"name": "python", "arguments": {}}').error
    assert p.parse("42").calls == () and not p.parse("42").error
    with pytest.raises(ValueError, match="unknown tool parser"):
        get_parser("chatml")


def add(a: int, b: float = 1.0) -> float:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def test_schema_from_callable_and_execute():
    assert tool_schema(add) == {"type": "function", "function": {
        "name": "add", "description": "Add two numbers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer", "description": "The first number."},
                                                        "b": {"type": "number", "description": "The second number."}},
                       "required": ["a"]}, "return": {"type": "number"}}}
    bare = {"name": "lookup", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
    assert tool_schema(bare)["function"]["name"] == "lookup"
    with pytest.raises(ValueError, match="type \"object\""):
        tool_schema({"name": "x", "parameters": {"type": "string"}})
    tools = ToolSet([add, bare])
    assert tools.names == ["add", "lookup"]
    assert tools.execute(ToolCall("add", {"a": 2, "b": 3})).observation == "5"  # 2 + 3
    assert tools.execute(ToolCall("add", {"c": 1})).info["invalid_action"]
    assert "unknown tool 'lookup'" in tools.execute(ToolCall("lookup", {"q": "x"})).observation  # schema only
    assert tools.execute(ToolCall("add", {"a": "x"})).observation.startswith("error: TypeError")


def _tokenizer(template: str = HERMES_TEMPLATE):
    native = NativeTools(get_parser("hermes"), ToolSet([add]))
    tok = build_tokenizer(["What is 6 times 7? the result is 17", native.tools_text()], vocab_size=300,
                          tags=native.tiny_tokenizer_tags())
    tok.chat_template = template
    return tok, native


def test_conformance_passes_for_hermes_template_and_the_loop_appends_the_tool_turn():
    tok, native = _tokenizer()
    assert check_conformance(tok, native) is None
    before, after = tool_wrap(tok, native)
    assert before == "<|im_end|>\n<|im_start|>tool\n<tool_response>\n"
    assert after == "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    ids, roles = render_tool_turn(tok, "42", native, last_action_id=None)
    assert tok.decode([i for i, r in zip(ids, roles) if r == TokenRole.OBSERVATION]) == "42"
    assert tok.decode(ids) == before + "42" + after


def test_conformance_refuses_a_template_that_drops_tool_calls():
    no_calls = HERMES_TEMPLATE.replace("{% for tc in m['tool_calls'] or [] %}", "{% for tc in [] %}")
    tok, native = _tokenizer(no_calls)
    problem = check_conformance(tok, native)
    assert problem is not None and "drops the assistant's tool_calls" in problem


def test_conformance_refuses_a_template_that_re_renders_the_call():
    compact = HERMES_TEMPLATE.replace('<tool_call>\n{"name": {{', '<tool_call>{"name": {{').replace(
        "}}}\n</tool_call>", "}}}</tool_call>")  # the call without the newlines the model writes
    assert compact != HERMES_TEMPLATE
    tok, native = _tokenizer(compact)
    problem = check_conformance(tok, native)
    assert problem is not None and "re-tokenize the actions" in problem


def test_run_refuses_a_broken_template(tmp_path):
    from tracerl.config import load_recipe
    from tracerl.errors import UserError
    from tracerl.run.multienv import resolve_routes
    from tracerl.run.tool_setup import prepare_tokenizer

    recipe = load_recipe("math_tool_native", [])
    tok, _ = _tokenizer(HERMES_TEMPLATE.replace("{% for tc in m['tool_calls'] or [] %}", "{% for tc in [] %}"))
    recipe = recipe.model_copy(update={"model": recipe.model.model_copy(update={"chat_template": "auto"})})
    with pytest.raises(UserError, match="native tool mode: .*drops the assistant's tool_calls"):
        prepare_tokenizer(recipe, None, tok, resolve_routes(recipe))


def test_sft_rows_with_tool_calls_train_only_assistant_tokens(tmp_path):
    from tracerl.errors import UserError
    from tracerl.train.demos import tokenize_demo
    from tracerl.train.sft_data import load_conversations

    tok, native = _tokenizer()
    row = {"messages": [
        {"role": "system", "content": "Use tools."}, {"role": "user", "content": "What is 6 times 7?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "add", "arguments": json.dumps({"a": 6, "b": 36})}}]},
        {"role": "tool", "content": "42"}, {"role": "assistant", "content": "42"}], "tools": [tool_schema(add)]}
    path = tmp_path / "sft.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(UserError, match="tool_calls.*env.tool_format: native"):
        load_conversations(path)
    demo = load_conversations(path, native=native)[0]
    ids, roles = tokenize_demo(tok, demo)
    action = [i for i, r in zip(ids, roles) if r == TokenRole.ACTION]
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 6, "b": 36}}\n</tool_call>'
    assert tok.decode(action, skip_special_tokens=False) == call + "42" + tok.eos_token  # the answer ends with EOS
    assert tok.decode([i for i, r in zip(ids, roles) if r == TokenRole.OBSERVATION]) == "42"
    as_dicts = row["messages"][:2] + [{**row["messages"][2], "tool_calls": [
        {"type": "function", "function": {"name": "add", "arguments": {"a": 6, "b": 36}}}]}, row["messages"][3]]
    whole = tok.apply_chat_template(as_dicts, tools=row["tools"], tokenize=False, add_generation_prompt=True)
    assert ids == list(tok(whole + "42" + tok.eos_token, add_special_tokens=False)["input_ids"])  # same ids as whole


def test_native_math_tool_runs_two_steps_and_round_trips_through_export(tmp_path):
    import subprocess
    import sys

    from tracerl.config import load_recipe
    from tracerl.run.pipeline import run_recipe

    recipe = load_recipe("math_tool_native", [
        f"run.root={tmp_path}", "run.threads=1", "run.progress=false", "sft.demos=48", "sft.epochs=2",
        "env.train_tasks=48", "env.heldout_tasks=4", "eval.tasks=4", "rl.steps=2", "rl.prompts_per_step=2",
        "rl.group_size=4", "rl.checkpoint_every=2",
        "model.tiny={hidden_size: 32, num_layers: 1, num_heads: 2, intermediate_size: 64, vocab_size: 320}"])
    result = run_recipe(recipe)
    assert (result.run_dir / "checkpoints" / "step_2").is_dir()
    out, raw = tmp_path / "m.jsonl", tmp_path / "t.jsonl"
    for fmt, path in (("messages", out), ("jsonl", raw)):
        subprocess.run([sys.executable, "-m", "tracerl.cli", "export", str(result.run_dir), "--format", fmt,
                        "--stage", "rl", "--out", str(path)], check=True, capture_output=True)
    trajs = {t["trajectory_id"]: t for t in map(json.loads, raw.read_text().splitlines())}
    assert trajs and all(t["env_revision"].endswith("+native-hermes") for t in trajs.values())
    from transformers import AutoTokenizer

    from tracerl.train.demos import tokenize_demo
    from tracerl.train.sft_data import load_conversations, native_tools_of

    tok = AutoTokenizer.from_pretrained(result.run_dir / "tokenizer")
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    demos = load_conversations(out, native=native_tools_of(recipe))  # the export loads back in native mode
    same = 0
    for row, demo in zip(rows, demos):
        t = trajs[row["trajectory_id"]]
        if t["terminal_reason"] == "eos" and t["token_ids"][-1] == tok.eos_token_id:  # the policy ended it
            # export -> SFT row -> the same text (ids may differ: an untrained policy samples token splits that
            # re-tokenizing the text would merge; RL itself never re-tokenizes)
            assert tok.decode(tokenize_demo(tok, demo)[0]) == tok.decode(t["token_ids"])
            same += 1
    assert same > 0
