"""Nothing that loads a checkpoint can run code planted in it (issue 38, "loading a checkpoint runs code").

A pickle whose `__reduce__` writes a marker file is planted in every file a checkpoint holds, in turn, and
the manifest's size and hash are updated to match (an attacker who can write the folder can rewrite its
manifest too). Then `tracerl eval CKPT`, `tracerl train --resume RUN` and the loader `tracerl serve`
uses each either refuse in one sentence (exit 2) or load safely; the marker never appears. A pickled
`trainer_state.pt` (the old format) and a pickled `pytorch_model.bin` beside the weights are refused, and
a manifest naming `../../x`, an absolute path or a symlink out of the folder is refused before any file
is read.
"""

import contextlib
import io
import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from tracerl.cli import main as cli
from tracerl.config import load_recipe
from tracerl.errors import UserError
from tracerl.store import RunDir
from tracerl.store.checkpoints import MANIFEST, confined, file_sha256, verify_checkpoint
from tracerl.train.checkpoint import load_checkpoint_model, load_trainer_state, save_checkpoint


class _Payload:
    """Unpickling this writes `path` (what a planted checkpoint would do with a shell instead)."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (exec, (f"open({self.path!r}, 'w').write('ran')",))


def _payload_bytes(marker: Path) -> bytes:
    return pickle.dumps({"state": _Payload(marker)})


def _plant(ckpt: Path, rel: str, data: bytes) -> None:
    """Write `data` as `ckpt/rel` and make the manifest agree with it (size and SHA-256)."""
    (ckpt / rel).write_bytes(data)
    manifest = json.loads((ckpt / MANIFEST).read_text())
    manifest["files"][rel] = {"bytes": len(data), "sha256": file_sha256(ckpt / rel)}
    (ckpt / MANIFEST).write_text(json.dumps(manifest))


def _run_cli(*argv) -> tuple[int, str]:
    """(exit code, stdout + stderr) of `tracerl ARGV`, run in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = cli([str(a) for a in argv])
    return code, out.getvalue() + err.getvalue()


def _one_sentence_or_ok(code: int, err: str, what: str) -> None:
    if code == 0:
        return
    assert code == 2, f"{what}: exit {code}\n{err[-2000:]}"
    lines = [ln for ln in err.splitlines() if ln.startswith("tracerl: error:")]
    assert len(lines) == 1 and "Traceback" not in err, f"{what}: {err[-2000:]}"


@pytest.fixture(scope="module")
def source_run(tmp_path_factory, tiny_dir):
    """A run directory of the smoke recipe (RL stage only, one step done) with one complete checkpoint,
    written by the real checkpoint writer from the tiny model; the recipe asks for no further step."""
    from tracerl.models import load_model_and_tokenizer

    root = tmp_path_factory.mktemp("safe")
    model_dir = tiny_dir
    model, tok = load_model_and_tokenizer(model_dir)
    recipe = load_recipe("smoke", ["rl.steps=1", "stages=[rl]", f"model.path={model_dir}", "eval.tasks=1",
                                   "eval.samples=1", "eval.k=[1]", "env.heldout_tasks=2", "env.train_tasks=8"])
    run = RunDir(root / "run", create=True)
    run.write_config(recipe.model_dump(mode="json"))
    run.store.add_event("start", "test run", stage="rl", step=0)
    state = {"stage": "rl", "step": 1, "policy_version": 1, "rl_stage": "rl", "generated_tokens": 0,
             "generator_state": torch.Generator().manual_seed(3).get_state()}
    save_checkpoint(run.checkpoints / "step_1", model, tok, state=state, reference=model, marks=run.marks())
    run.close()
    return root / "run"


def _fresh_copy(source_run: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(source_run, dst)
    return dst


def test_a_clean_checkpoint_loads_through_every_entry(source_run, tmp_path):
    run = _fresh_copy(source_run, tmp_path)
    ckpt = run / "checkpoints" / "step_1"
    assert verify_checkpoint(ckpt) == ""
    state = load_trainer_state(ckpt)
    assert state["policy_version"] == 1 and torch.is_tensor(state["generator_state"])
    model, _ = load_checkpoint_model(ckpt)  # what `tracerl serve --model CKPT` calls
    assert sum(p.numel() for p in model.parameters()) > 0
    code, err = _run_cli("eval", ckpt, "--env", "math_tool", "--n", "1", "--k", "1", "--tasks", "1",
                         "--out", tmp_path / "ev")
    assert code == 0, err[-2000:]
    code, err = _run_cli("train", "--resume", run)  # the step asked for is done: loads, finishes, exit 0
    assert code == 0, err[-2000:]


def _checkpoint_files(source_run: Path) -> list[str]:
    ckpt = source_run / "checkpoints" / "step_1"
    return sorted(p.relative_to(ckpt).as_posix() for p in ckpt.rglob("*") if p.is_file())


def test_a_pickle_in_any_checkpoint_file_never_runs(source_run, tmp_path):
    files = _checkpoint_files(source_run) + ["trainer_state.pt", "pytorch_model.bin"]  # + the old format, a .bin
    assert {"model.safetensors", "trainer_state.json", "trainer_state.safetensors", MANIFEST} <= set(files)
    marker = tmp_path / "PWNED"
    outcomes = {}
    for rel in files:
        case = tmp_path / rel.replace("/", "_")
        run = _fresh_copy(source_run, case)
        ckpt = run / "checkpoints" / "step_1"
        data = _payload_bytes(marker)
        if rel == MANIFEST:
            (ckpt / MANIFEST).write_bytes(data)
        elif rel == "trainer_state.pt":  # the format older checkpoints held, as torch.save writes it
            buf = io.BytesIO()
            torch.save({"step": 1, "x": _Payload(marker)}, buf)
            _plant(ckpt, rel, buf.getvalue())
        else:
            _plant(ckpt, rel, data)
        got = []
        code, err = _run_cli("eval", ckpt, "--env", "math_tool", "--n", "1", "--k", "1", "--tasks", "1",
                             "--out", case / "ev")
        _one_sentence_or_ok(code, err, f"eval with {rel} planted")
        got.append(code)
        code, err = _run_cli("train", "--resume", run)
        _one_sentence_or_ok(code, err, f"--resume with {rel} planted")
        got.append(code)
        try:
            load_checkpoint_model(ckpt, key="--model")  # the loader `tracerl serve` uses
            got.append(0)
        except UserError as exc:
            assert "\n" not in str(exc)
            got.append(2)
        assert not marker.exists(), f"the pickle planted in {rel} ran"
        outcomes[rel] = got
    # (eval, --resume, serve's loader): 2 = refused in one sentence, 0 = loaded safely
    for rel in ("MANIFEST.json", "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                "trainer_state.pt", "pytorch_model.bin"):  # read by all three: each refuses
        assert outcomes[rel] == [2, 2, 2], (rel, outcomes[rel])
    for rel in ("trainer_state.json", "trainer_state.safetensors"):  # eval (policy version) and resume read them
        assert outcomes[rel][:2] == [2, 2], (rel, outcomes[rel])
    assert outcomes["reference.safetensors"][1] == 2  # only --resume reads the KL reference


@pytest.mark.parametrize("name", ["../../x", "/etc/passwd", "a/../../x", "sub/../../x", "link"])
def test_manifest_paths_outside_the_folder_are_refused(source_run, tmp_path, name):
    run = _fresh_copy(source_run, tmp_path)
    ckpt = run / "checkpoints" / "step_1"
    (tmp_path / "x").write_text("outside")
    if name == "link":
        os.symlink(tmp_path / "x", ckpt / "link")
    manifest = json.loads((ckpt / MANIFEST).read_text())
    manifest["files"][name] = {"bytes": 7, "sha256": file_sha256(tmp_path / "x")}
    (ckpt / MANIFEST).write_text(json.dumps(manifest))
    assert "outside the checkpoint folder" in verify_checkpoint(ckpt)
    code, err = _run_cli("eval", ckpt, "--env", "math_tool", "--n", "1", "--k", "1")
    assert code == 2 and "outside the checkpoint folder" in err
    with pytest.raises(UserError, match="outside the checkpoint folder"):
        load_checkpoint_model(ckpt)
    code, err = _run_cli("train", "--resume", run)
    assert code == 2 and "outside the checkpoint folder" in err


def test_confined_accepts_only_plain_relative_paths(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b.json").write_text("{}")
    assert confined(tmp_path, "a/b.json") == tmp_path / "a" / "b.json"
    for bad in ["", ".", "./a", "a//b", "a\\b", "/a", "..", "a/..", 3, None, "a\0b"]:
        assert confined(tmp_path, bad) is None, bad


def test_no_loader_in_the_source_unpickles():
    """The class, not the instance: no module of tracerl calls pickle loads, torch.load with
    weights_only=False, np.load with allow_pickle, or yaml.load without a safe loader."""
    import re

    import tracerl

    src = Path(tracerl.__file__).parent
    bad = re.compile(r"pickle\.loads?\(|\bUnpickler\(|weights_only\s*=\s*False|allow_pickle\s*=\s*True|yaml\.unsafe_load"
                     r"|yaml\.load\(|marshal\.loads?\(|shelve\.open|dill\.loads?\(|torch\.load\(")
    safe = re.compile(r"weights_only\s*=\s*True|Loader\s*=\s*yaml\.SafeLoader")  # torch.load / yaml.load made safe
    hits = [f"{p.relative_to(src)}:{i}" for p in src.rglob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1)
            if bad.search(line) and not (safe.search(line) and not re.search(r"weights_only\s*=\s*False", line))]
    assert hits == []
