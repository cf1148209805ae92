"""The real CLI in a subprocess: the smoke recipe end to end, and bad input as one clear sentence."""

import json
import os
import subprocess
import sys

import pytest

TRACERL = [sys.executable, "-m", "tracerl.cli"]


def _run(*args, cwd=None, timeout=240):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([*TRACERL, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs") / "smoke"
    proc = _run("train", "smoke", f"run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir, proc


def test_smoke_writes_a_complete_run_directory(smoke_run):
    run_dir, proc = smoke_run
    for name in ("manifest.json", "config.yaml", "store.sqlite", "metrics.jsonl", "summary.json", "tokenizer"):
        assert (run_dir / name).exists(), name
    manifest = json.loads((run_dir / "manifest.json").read_text())
    for key in ("code", "config_sha256", "packages", "tokenizer", "tasks", "env", "verifier", "sandbox",
                "seeds", "hardware", "truncation_policy"):
        assert key in manifest, key
    assert len(manifest["tokenizer"]["tokenizer_sha256"]) == 64
    assert "held-out success" in proc.stdout and "rl step   2/2" in proc.stdout


def test_checkpoint_loads_with_transformers(smoke_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run_dir, _ = smoke_run
    ckpt = run_dir / "checkpoints" / "step_2"
    assert (ckpt / "model.safetensors").exists() and (ckpt / "trainer_state.json").exists()
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    tok = AutoTokenizer.from_pretrained(ckpt)
    ids = tok.apply_chat_template([{"role": "user", "content": "Ann has 3 apples."}], tokenize=False,
                                  add_generation_prompt=True)
    assert model(**tok(ids, return_tensors="pt")).logits.shape[-1] == len(tok)


def test_export_jsonl_has_contract_fields(smoke_run):
    run_dir, _ = smoke_run
    proc = _run("export", str(run_dir), "--format", "jsonl", "--stage", "rl")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(rows) == 2 * 4 * 8  # steps x prompts x group
    r = rows[0]
    assert len(r["token_ids"]) == len(r["roles"]) == len(r["behavior_logprobs"]) == len(r["policy_versions"])
    assert set(r["roles"]) <= {"prompt", "action", "observation", "template", "pad"}
    for key in ("trajectory_id", "group_id", "task_id", "reward_components", "reward_weights", "terminal_reason",
                "truncated", "spans", "env_revision", "tokenizer_sha256"):
        assert key in r


def test_export_parquet(smoke_run, tmp_path):
    import pyarrow.parquet as pq

    run_dir, _ = smoke_run
    out = tmp_path / "t.parquet"
    proc = _run("export", str(run_dir), "--format", "parquet", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert pq.read_table(out).num_rows > 0


@pytest.mark.parametrize("args,needle", [
    (["train", "smoke", "model.path=/nonexistent/model"], "model path /nonexistent/model does not exist"),
    (["train", "smoke", "rl.stepz=3"], "did you mean 'rl.steps'"),
    (["train", "nosuchrecipe"], "no recipe named 'nosuchrecipe'"),
    (["export", "/nonexistent/run"], "is not a tracerl run directory"),
])
def test_bad_input_is_one_sentence_exit_2(args, needle, tmp_path):
    proc = _run(*args, f"run.dir={tmp_path / 'r'}" if args[0] == "train" else "--format=jsonl", timeout=120)
    assert proc.returncode == 2
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_malformed_recipe_file_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("run: {name: x\nrl: [\n")
    proc = _run("train", str(bad))
    assert proc.returncode == 2 and "not valid YAML" in proc.stderr and "Traceback" not in proc.stderr
    notyaml = tmp_path / "r.yaml"
    notyaml.write_text("just a sentence")
    proc = _run("train", str(notyaml))
    assert proc.returncode == 2 and "must be a YAML mapping" in proc.stderr


def test_gate_stops_training_with_checkpoint_and_exit_3(tmp_path):
    from tracerl.store import RunDir

    run_dir = tmp_path / "gated"
    # an impossible entropy floor: the gate must fire at the first RL step
    proc = _run("train", "smoke", f"run.dir={run_dir}", "gates.entropy_floor=1000", "gates.entropy_patience=1")
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "stopped by a gate" in proc.stderr and "Traceback" not in proc.stderr
    assert (run_dir / "checkpoints" / "step_1" / "trainer_state.json").exists()
    run = RunDir(run_dir)
    (event,) = run.store.events("gate")
    assert event["payload"]["gate"] == "entropy_floor" and event["step"] == 1
    run.close()


def test_resume_continues_from_the_latest_checkpoint(smoke_run, tmp_path):
    import shutil

    from tracerl.store import RunDir

    src, _ = smoke_run
    run_dir = tmp_path / "copy"
    shutil.copytree(src, run_dir)
    proc = _run("train", "--resume", str(run_dir), "rl.steps=3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "resuming" in proc.stdout and "rl step   3/3" in proc.stdout and "rl step   1/" not in proc.stdout
    assert (run_dir / "checkpoints" / "step_3" / "model.safetensors").exists()
    run = RunDir(run_dir)
    assert [e["step"] for e in run.store.events("resume")] == [2]
    assert run.store.count("rl") == 3 * 4 * 8  # 2 original steps + 1 resumed, 32 episodes each
    run.close()
