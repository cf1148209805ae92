"""Bad input, round 3: one sentence on stderr naming the problem and the fix, exit 2, no traceback.
On the main of 2026-12-05 a model folder whose config.json is `{}` gave a traceback, `tasks check` on an
empty file exited 0, and a prompt longer than env.max_tokens gave a run of silent zeros."""

import json
import os
import shutil

import pytest

from tracerl.cli import main


def _tree(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs + [""])


def _one_sentence(capsys, code: int) -> str:
    out = capsys.readouterr()
    assert code == 2, out
    lines = [line for line in out.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tracerl: error: ") and "Traceback" not in out.err, out.err
    return lines[0]


@pytest.mark.parametrize("config,needle", [
    ({}, "has no model_type"),
    ({"hidden_size": 64}, "has no model_type"),
    ({"model_type": ""}, "has no model_type"),
    ({"model_type": "no_such_architecture"}, "does not know"),
    ([1, 2], "not a Hugging Face model config"),
    ("not json", "not valid JSON"),
])
def test_a_broken_model_config_is_one_sentence(tmp_path, monkeypatch, capsys, config, needle):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    monkeypatch.chdir(tmp_path)
    before = _tree(tmp_path)
    line = _one_sentence(capsys, main(["train", "smoke", f"model.path={model}"]))
    assert needle in line and "config.json" in line
    assert _tree(tmp_path) == before  # nothing created


def test_a_model_folder_transformers_cannot_read_is_one_sentence(tiny_dir, tmp_path, monkeypatch, capsys):
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(tiny_dir / "config.json", model / "config.json")  # a valid config, no tokenizer or weights
    monkeypatch.chdir(tmp_path)
    before = _tree(tmp_path)
    line = _one_sentence(capsys, main(["train", "smoke", f"model.path={model}"]))
    assert "could not load the tokenizer" in line and str(model) in line and "model.path" in line
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("content", [b"", b"\n   \n\t\n"])
def test_tasks_check_refuses_an_empty_or_blank_file(tmp_path, capsys, content):
    f = tmp_path / "tasks.jsonl"
    f.write_bytes(content)
    line = _one_sentence(capsys, main(["tasks", "check", str(f)]))
    assert "holds no task rows" in line and str(f) in line
    assert f.read_bytes() == content


def test_tasks_check_still_passes_a_good_file(tmp_path, capsys):
    f = tmp_path / "tasks.jsonl"
    f.write_text('{"id": "t1", "prompt": "What is 2+3?", "answer": "5"}\n')
    assert main(["tasks", "check", str(f), "--license", "mit"]) == 0


def test_a_prompt_longer_than_the_budget_stops_the_run_in_one_sentence(tmp_path, capsys):
    # smoke's math_tool prompts render to ~100 tokens; a 60-token budget leaves no room to act
    code = main(["train", "smoke", "env.max_tokens=60", "run.threads=1", f"run.dir={tmp_path / 'run'}"])
    line = _one_sentence(capsys, code)
    assert "env.max_tokens" in line and "leaves no room" in line and "task 'math-" in line
    n = int(line.split(") is ")[1].split(" tokens")[0])
    assert 60 <= n < 400
    assert not (tmp_path / "run" / "checkpoints").exists() or not any((tmp_path / "run" / "checkpoints").iterdir())
