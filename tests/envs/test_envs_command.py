import json

from tracerl.cli import main

SUITE = {"search_qa", "code_tests", "text_world", "workplace_db", "reasoning_gym"}


def test_envs_json_lists_every_environment_with_its_fields(capsys):
    assert main(["envs", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert SUITE <= set(rows)
    tw = rows["text_world"]
    assert tw["revision"] == "text_world-env-1" and tw["tools"] == ["action"]
    assert tw["reward_components"] == {"success": 1.0, "invalid_actions": -0.1}
    assert tw["difficulty_range"] == [0.0, 1.0]
    for name in SUITE:
        assert set(rows[name]) >= {"name", "revision", "tools", "reward_components", "difficulty_range"}


def test_envs_table(capsys):
    assert main(["envs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["name", "revision"]
    assert any(line.startswith("workplace_db ") and "1×correct + -0.1×invalid_actions" in line for line in lines)


def test_envs_lists_reasoning_gym_without_the_optional_package(capsys, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "reasoning_gym", None)  # import now fails
    assert main(["envs", "--json"]) == 0
    assert "reasoning_gym" in {r["name"] for r in json.loads(capsys.readouterr().out)}
