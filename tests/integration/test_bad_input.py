"""Bad input at the command line: one sentence naming the problem and the fix, exit 2, no traceback,
nothing created. Every case here gave a traceback or exited 0 on the main of 2026-12-01."""

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracerl.cli import main
from tracerl.config import load_recipe
from tracerl.errors import UserError

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
    f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(8))

FILES = {
    "binary.yaml": bytes(range(256)) * 4,
    "utf16.yaml": "run: {name: x}\n".encode("utf-16"),
    "empty.yaml": b"",
    "comments.yaml": b"# nothing but a comment\n",
    "bomb.yaml": BOMB.encode(),  # 9^9 = 387 million strings once expanded
    "list.yaml": b"- run\n- model\n",
    "deep.yaml": b"[" * 5000 + b"]" * 5000,
    "empty.jsonl": b"",
    "allbad.jsonl": b'{"x": 1}\nnot json\n',
    "deep.jsonl": b"[" * 100000 + b"]" * 100000 + b"\n",
}


@pytest.fixture
def work(tmp_path, monkeypatch):
    for name, data in FILES.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "brokenmodel").mkdir()
    (tmp_path / "brokenmodel" / "config.json").write_text("{")
    (tmp_path / "oldrun" / "checkpoints" / "step_").mkdir(parents=True)
    (tmp_path / "oldrun" / "checkpoints" / "step_abc").mkdir()
    (tmp_path / "oldrun" / "checkpoints" / "step_3").mkdir()  # empty: an interrupted write
    (tmp_path / "oldrun" / "store.sqlite").write_bytes(b"")
    (tmp_path / "oldrun" / "config.yaml").write_text("run: {name: old, threads: 1}\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _tree(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs + [""])


CASES = [
    (["train", "binary.yaml"], "not UTF-8"),
    (["train", "utf16.yaml"], "UTF-16"),
    (["train", "empty.yaml"], "is empty"),
    (["train", "comments.yaml"], "is empty"),
    (["train", "bomb.yaml"], "aliases"),
    (["train", "list.yaml"], "mapping"),
    (["train", "deep.yaml"], "nested"),
    (["train", "smoke", "run.name=[unclosed"], "not valid YAML"),
    (["train", "smoke", "sft.lr={a: [}"], "not valid YAML"),
    (["train", "smoke", "run.name=" + "x" * 5000], "run.name"),
    (["train", "smoke", "run.name=../escape"], "run.name"),
    (["train", "smoke", "run.threads=0"], "run.threads"),
    (["train", "smoke", "run.threads=-4"], "run.threads"),
    (["train", "smoke", "env.max_tokens=0"], "env.max_tokens"),
    (["train", "smoke", "env.max_turns=-1"], "env.max_turns"),
    (["train", "smoke", "eval.k=[0]"], "eval.k"),
    (["train", "smoke", "eval.k=[1, 9]"], "eval.k"),
    (["train", "smoke", "eval.samples=0"], "eval.samples"),
    (["train", "smoke", "sampling.temperature=-1"], "sampling.temperature"),
    (["train", "smoke", "sampling.top_p=0"], "sampling.top_p"),
    (["train", "smoke", "sft.lr=-0.1"], "sft.lr"),
    (["train", "smoke", "sft.lr=.nan"], "sft.lr"),
    (["train", "smoke", "sft.batch_size=0"], "sft.batch_size"),
    (["train", "smoke", "env.train_difficulty=[0.9, 0.1]"], "train_difficulty"),
    (["train", "smoke", "model.tiny.num_heads=3"], "num_heads"),
    (["train", "smoke", "model.path=brokenmodel"], "config.json"),
    (["train", "smoke", "tasks.sources=[{path: empty.jsonl, license: mit}]"], "no valid task"),
    (["train", "smoke", "tasks.sources=[{path: allbad.jsonl, license: mit}]"], "no valid task"),
    (["train", "smoke", "tasks.sources=[{path: deep.jsonl, license: mit}]"], "no valid task"),
    (["train", "--resume", "oldrun"], "no complete checkpoint"),
]


@pytest.mark.parametrize("argv, words", CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_bad_input_is_one_sentence_and_exit_2(work, capsys, argv, words):
    before = _tree(work)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert words in err, err
    assert "Traceback" not in err and len(err) < 600 and err.count("\n") <= 2, err
    assert _tree(work) == before  # nothing created, nothing lost


YAMLISH = st.text(alphabet=st.sampled_from(list("abcrunseedthreads:{}[]&*!|>-,.'\"#%@`0123456789 \n\t\\") +
                                           ["\x00", "\ud800", "é"]), max_size=120)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=YAMLISH, override=YAMLISH)
def test_any_recipe_or_override_text_loads_or_is_one_user_error(tmp_path, text, override):
    path = tmp_path / "fuzz.yaml"
    try:
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
    except UnicodeEncodeError:
        return
    for args in ((str(path), []), ("smoke", [f"run.seed={override}"]), ("smoke", [override])):
        try:
            load_recipe(*args)
        except UserError as err:
            assert "Traceback" not in str(err) and len(str(err)) < 2000
