import hashlib
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tracerl.errors import UserError
from tracerl.tasks import Task, TaskSourceConfig, load_generator, load_source, load_task_file, tasks_sha256


def good(tid, **kw):
    return {"id": tid, "prompt": f"What is {tid} plus one?", "answer": "x", "license": "MIT", **kw}


def test_jsonl_with_bad_rows_keeps_good_rows_and_names_each_bad_line(write_jsonl):
    path = write_jsonl([
        good("a"),                                                   # line 1: good
        "",                                                          # line 2: blank, skipped silently
        "{not json",                                                 # line 3
        {"id": "b", "prompt": "no answer here", "license": "MIT"},   # line 4
        good("c", split="test"),                                     # line 5
        good("d", question="misnamed column"),                       # line 6
        good("a"),                                                   # line 7: duplicate id
        "[1, 2]",                                                    # line 8: not an object
        good("e", prompt=[{"role": "user", "content": "Add 2 and 2."}], answer=4),  # line 9: good
        {"id": "f", "prompt": "fine prompt", "answer": "1", "license": ""},  # line 10: an empty license
        good("g", difficulty="hard"),                                # line 11
        good("h", prompt="   "),                                     # line 12
    ])
    src = load_task_file(str(path))
    assert [t.id for t in src.tasks] == ["a", "e"]
    got = [(e.line, e.reason) for e in src.errors]
    assert [line for line, _ in got] == [3, 4, 5, 6, 7, 8, 10, 11, 12]
    reasons = dict(got)
    assert reasons[3].startswith("not valid JSON")
    assert "needs an `answer` or `tests`" in reasons[4]
    assert "split is 'test'" in reasons[5]
    assert "unknown field 'question'" in reasons[6] and "field_map" in reasons[6]
    assert reasons[7] == "duplicate id 'a' (first at line 1)"
    assert "must be an object" in reasons[8]
    assert "license must be a non-empty string" in reasons[10]
    assert "difficulty must be a finite number" in reasons[11]
    assert reasons[12] == "prompt is empty"
    assert str(src.errors[0]) == f"{path}: line 3: {reasons[3]}"
    # The messages prompt is kept as messages and the answer keeps its JSON type.
    e = src.tasks[1]
    assert e.prompt == [{"role": "user", "content": "Add 2 and 2."}] and e.answer == 4


def test_source_defaults_fill_license_split_revision_and_field_map(write_jsonl):
    path = write_jsonl([{"id": 1, "question": "What is 1+1?", "solution": "2"},
                        {"id": "2", "question": "What is 2+2?", "solution": "4", "split": "heldout",
                         "source_revision": "v7", "metadata": "{\"level\": 3}"}])
    src = load_source(TaskSourceConfig(path=str(path), name="arith", license="CC-BY-4.0",
                                       field_map={"question": "prompt", "solution": "answer"}))
    assert not src.errors
    t1, t2 = src.tasks
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert (t1.id, t1.source, t1.license, t1.split, t1.source_revision) == ("1", "arith", "CC-BY-4.0", "train",
                                                                           f"sha256:{digest[:12]}")
    assert (t2.split, t2.source_revision, t2.metadata) == ("heldout", "v7", {"level": 3})
    entry = src.manifest_entry()
    assert entry["content_sha256"] == digest
    assert entry["tasks_sha256"] == tasks_sha256(src.tasks)
    assert entry["revisions"] == sorted([f"sha256:{digest[:12]}", "v7"]) and entry["num_bad_rows"] == 0


def test_content_hash_changes_with_content(write_jsonl):
    a = load_task_file(str(write_jsonl([good("a")], "one.jsonl")))
    b = load_task_file(str(write_jsonl([good("a", answer="y")], "two.jsonl")))
    assert a.tasks_sha256 != b.tasks_sha256 and a.content_sha256 != b.content_sha256


def test_parquet_rows_numbered_from_one(tmp_path):
    # from_pylist takes its columns from the first row, so that row names `tests` (null).
    rows = [good("a", tests=None), {"id": "b", "prompt": "q", "answer": None, "license": "MIT"},
            good("c", tests=["assert f()"])]
    path = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    src = load_task_file(str(path))
    assert [t.id for t in src.tasks] == ["a", "c"]
    assert [(e.unit, e.line) for e in src.errors] == [("row", 2)]
    assert src.tasks[1].tests == ["assert f()"]


def _save_arrow_split(directory, rows):
    """The layout `Dataset.save_to_disk` writes: Arrow stream files listed in state.json."""
    directory.mkdir(parents=True)
    table = pa.Table.from_pylist(rows)
    with pa.OSFile(str(directory / "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    state = {"_data_files": [{"filename": "data-00000-of-00001.arrow"}], "_fingerprint": directory.name,
             "_format_columns": None, "_format_kwargs": {}, "_format_type": None, "_output_all_columns": False,
             "_split": directory.name}
    (directory / "state.json").write_text(json.dumps(state))
    (directory / "dataset_info.json").write_text("{}")


def test_saved_hf_dataset_dict_reads_the_chosen_split(tmp_path):
    root = tmp_path / "gsm_like"
    _save_arrow_split(root / "train", [{"id": "t1", "problem": "Two plus two?", "answer": "4"},
                                       {"id": "t2", "problem": None, "answer": "5"}])
    _save_arrow_split(root / "test", [{"id": "e1", "problem": "Three plus three?", "answer": "6"}])
    (root / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}))
    cfg = dict(path=str(root), kind="hf", license="MIT", field_map={"problem": "prompt"})
    with pytest.raises(UserError, match="choose one with hf_split"):
        load_source(TaskSourceConfig(**cfg))
    src = load_source(TaskSourceConfig(**cfg, hf_split="train"))
    assert [t.id for t in src.tasks] == ["t1"] and src.tasks[0].source == "gsm_like"
    assert [(e.line, e.reason) for e in src.errors] == [(2, "the row has no `prompt`")]
    held = load_source(TaskSourceConfig(**cfg, hf_split="test", split="heldout"))
    assert [(t.id, t.split) for t in held.tasks] == [("e1", "heldout")]


def fake_generate(split, n, seed, difficulty):
    """Deterministic stand-in for an env's generator: a + b with seed-dependent operands."""
    out = []
    for i in range(n):
        a, b = (seed * 31 + i * 7) % 50, (seed * 17 + i * 3) % 50
        out.append(Task(id=f"{split}-{seed}-{i}", source="fake", prompt=f"What is {a} + {b}?", answer=str(a + b),
                        split=split, difficulty=float(difficulty or 0), source_revision="fake@1"))
    return out


def test_generator_source_is_deterministic_and_checked():
    a = load_generator(fake_generate, name="fake", split="heldout", n=5, seed=3, difficulty=2)
    b = load_generator(fake_generate, name="fake", split="heldout", n=5, seed=3, difficulty=2)
    c = load_generator(fake_generate, name="fake", split="heldout", n=5, seed=4, difficulty=2)
    assert len(a.tasks) == 5 and not a.errors and all(t.split == "heldout" for t in a.tasks)
    assert a.content_sha256 == b.content_sha256 != c.content_sha256

    def sloppy(split, n, seed, difficulty):
        ts = fake_generate(split, n, seed, difficulty)
        return [ts[0], Task(id="x", source="fake", prompt="p", answer="1", split="heldout"), ts[0], "oops"]

    bad = load_generator(sloppy, name="fake", split="train", n=2, seed=0)
    assert [t.id for t in bad.tasks] == ["train-0-0"]
    assert [(e.unit, e.line) for e in bad.errors] == [("task", 2), ("task", 3), ("task", 4)]
    assert "asked for split 'train' but returned 'heldout'" in bad.errors[0].reason
    assert "duplicate id" in bad.errors[1].reason and "not a Task" in bad.errors[2].reason


def test_missing_file_and_bad_config_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_task_file(str(tmp_path / "absent.jsonl"))
    with pytest.raises(ValueError, match="needs a `path`"):
        TaskSourceConfig()
    assert TaskSourceConfig(path="x.parquet").kind == "parquet"
    assert TaskSourceConfig(path="dir").kind == "hf"
    assert TaskSourceConfig(env="math_tool").kind == "generator"


def test_every_registered_env_generates_schema_valid_tasks():
    """The trainer loads env tasks through the schema: a generator whose rows it rejects trains on nothing."""
    import importlib.util

    from tracerl.envs import env_names, get_env

    optional = {"reasoning_gym": "reasoning_gym"}  # env -> the optional package it needs
    for name in env_names():
        if ":" in name:  # registered at run time by an adapter test (verifiers:…, openenv:…): not a shipped generator
            continue
        if name in optional and importlib.util.find_spec(optional[name]) is None:
            continue
        spec = get_env(name)
        for split in ("train", "heldout"):
            src = load_generator(spec.generate, name=name, split=split, n=8, seed=0)
            assert len(src.tasks) == 8 and not src.errors, (name, split, src.errors[:1])
            assert {t.source for t in src.tasks} == {name}


def test_a_plain_task_file_without_licenses_loads_as_unknown_and_warns_once(tmp_path, capsys):
    from tracerl.tasks.sources import load_task_file as load

    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps({"id": f"q{i}", "prompt": f"What is {i}+1?", "answer": str(i + 1)})
                              for i in range(3)) + "\n")
    first, again = load(str(path)), load(str(path))
    assert [t.license for t in first.tasks] == ["unknown"] * 3 and not first.errors and len(again.tasks) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "3 task(s)" in err[0] and "recorded as 'unknown'" in err[0]
    assert first.manifest_entry()["licenses"] == {"unknown": 3}
