"""SFT from a conversations file (`sft.data`): validation, token roles, and a CLI run."""

import json
from pathlib import Path

import pytest

from tracerl.cli import main
from tracerl.config import load_recipe
from tracerl.contract.roles import TokenRole
from tracerl.errors import UserError
from tracerl.train.demos import tokenize_demo
from tracerl.train.sft_data import load_conversations

EXAMPLE = Path(__file__).parents[2] / "examples" / "sft" / "math_tool_conversations.jsonl"
U = {"role": "user", "content": "What is 3 * 4?"}
A1 = {"role": "assistant", "content": "<code>print(3 * 4)</code>"}
T = {"role": "tool", "content": "<output>12</output>"}
A2 = {"role": "assistant", "content": "<answer>12</answer>"}


def _write(tmp_path, *rows) -> Path:
    p = tmp_path / "conv.jsonl"
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return p


def test_shipped_example_loads_with_tool_turns():
    demos = load_conversations(EXAMPLE)
    assert len(demos) == 300
    with_tool = [d for d in demos if len(d.turns) == 2]
    assert with_tool and all(d.turns[0][1].startswith("<output>") and d.turns[-1][1] is None for d in with_tool)
    assert all(d.turns[-1][0].startswith("<answer>") for d in demos)


def test_only_assistant_tokens_are_actions(tiny, tmp_path):
    _, tok = tiny
    [demo] = load_conversations(_write(tmp_path, {"messages": [{"role": "system", "content": "Be brief."}, U, A1, T, A2]}))
    ids, roles = tokenize_demo(tok, demo)
    action = [i for i, r in zip(ids, roles) if r == TokenRole.ACTION]
    obs = [i for i, r in zip(ids, roles) if r == TokenRole.OBSERVATION]
    # the ACTION tokens are exactly the two assistant messages, tokenized on their own, in order
    expect = tok(A1["content"], add_special_tokens=False)["input_ids"] + tok(A2["content"], add_special_tokens=False)["input_ids"]
    assert action == expect
    assert tok.decode(obs) == T["content"]
    assert roles[0] != TokenRole.ACTION and TokenRole.PROMPT in roles


BAD = [
    ("not json", "line 2: not valid JSON"),
    ({"msgs": []}, "line 2: a line must be a JSON object with a `messages` list"),
    ({"messages": [U]}, "line 2: the conversation has no assistant message"),
    ({"messages": [A2]}, "line 2: the messages before the first assistant message must be system/user"),
    ({"messages": [U, A1, T]}, "line 2: the conversation ends on a tool message"),
    ({"messages": [U, A1, A2]}, "line 2: message 2 is 'assistant' where 'tool' was expected"),
    ({"messages": [U, {"role": "assistant", "content": "", "tool_calls": [{"id": "1"}]}]},
     "line 2: message 1 uses the OpenAI `tool_calls` field; write the tool call in the environment's grammar"),
    ({"messages": [U, {"role": "robot", "content": "x"}]}, "line 2: message 1 has no role"),
    ({"messages": [U, {"role": "assistant", "content": 5}]}, "line 2: message 1 (assistant) has no text `content`"),
]


@pytest.mark.parametrize("row,message", BAD, ids=[m.split(": ")[1][:30] for _, m in BAD])
def test_a_bad_line_is_named_with_its_fix(tmp_path, row, message):
    path = _write(tmp_path, {"messages": [U, A2]}, row)
    with pytest.raises(UserError) as err:
        load_conversations(path)
    assert str(err.value).startswith(f"{path}:{message.split(':')[0].split()[-1]}:")
    assert message.split(": ", 1)[1] in str(err.value) and "\n" not in str(err.value)


def test_bad_files(tmp_path):
    with pytest.raises(UserError, match="is not a file"):
        load_conversations(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(UserError, match="holds no conversation"):
        load_conversations(tmp_path / "empty.jsonl")
    (tmp_path / "latin.jsonl").write_bytes(b'{"messages": []}\n\xff\xfe\n')
    with pytest.raises(UserError, match=r"latin.jsonl:2: the file is not UTF-8"):
        load_conversations(tmp_path / "latin.jsonl")


def test_sft_data_implies_source_data_and_unused_settings_are_refused():
    assert load_recipe("smoke", [f"sft.data={EXAMPLE}"]).sft.source == "data"
    with pytest.raises(UserError, match="sft.data names no file"):
        load_recipe("smoke", ["sft.source=data"])
    with pytest.raises(UserError, match="only read when sft.source is data"):
        load_recipe("smoke", [f"sft.data={EXAMPLE}", "sft.source=expert"])
    with pytest.raises(UserError, match="nothing rejection-samples"):
        load_recipe("smoke", ["sft.rejection.samples=2"])


def test_cli_trains_from_the_file_and_a_bad_file_exits_2_creating_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    bad = _write(tmp_path, {"messages": [U, A1, T]})
    assert main(["train", "smoke", f"sft.data={bad}", "run.threads=1"]) == 2
    assert "conv.jsonl:1: the conversation ends on a tool message" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    assert main(["train", "smoke", f"sft.data={EXAMPLE}", "stages=[sft,eval]", "run.threads=1", "sft.epochs=2"]) == 0
    out = capsys.readouterr().out
    assert f"sft: 300 conversations from {EXAMPLE}" in out and "held-out success" in out


def test_a_dumped_recipe_loads_back():
    """config.yaml holds every field, defaults included: reloading it must not trip the unused-setting checks."""
    from tracerl.config import Recipe

    for over in ([], [f"sft.data={EXAMPLE}"], ["stages=[sft,eval,rft,eval]", "sft.rejection.samples=2"]):
        r = load_recipe("smoke", over)
        assert Recipe.model_validate(r.model_dump(mode="json")) == r
