"""Atomic, verifiable checkpoints and a store that a resume rolls back to the checkpoint's marks."""

import json
import os
import sys
from pathlib import Path

import pytest

from tracerl.contract import TerminalReason, TokenRole, Trajectory
from tracerl.contract.serialize import metadata_dict
from tracerl.store import RunDir
from tracerl.store.sqlite import _meta_json
from tracerl.train.checkpoint import MANIFEST, checkpoint_marks, save_checkpoint, verify_checkpoint


def _traj(tid: str) -> Trajectory:
    t = Trajectory(trajectory_id=tid, group_id="g", task_id="k", env_name="math_tool")
    t.append([1, 2], TokenRole.PROMPT)
    s, e = t.append([3], TokenRole.ACTION, logprobs=[-0.5], policy_version=1)
    t.add_span("action", s, e, tool_status="ok")
    t.set_reward({"correct": 1.0}, {"correct": 1.0})
    t.finish(TerminalReason.EOS)
    return t


@pytest.fixture
def run(tmp_path):
    r = RunDir(tmp_path / "run", create=True)
    yield r
    r.close()


def test_a_saved_checkpoint_verifies_and_lists_every_file(tiny, run):
    model, tok = tiny
    path = save_checkpoint(run.checkpoints / "step_1", model, tok, state={"stage": "rl", "step": 1}, marks={"events": 3})
    manifest = json.loads((path / MANIFEST).read_text())
    on_disk = {p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()} - {MANIFEST}
    assert set(manifest["files"]) == on_disk and "model.safetensors" in on_disk
    assert verify_checkpoint(path) == "" and checkpoint_marks(path) == {"events": 3}
    assert not list(run.checkpoints.glob(".tmp-*"))  # nothing left of the temporary folder


def test_damaged_or_partial_checkpoints_are_skipped_with_the_reason(tiny, run, capsys):
    model, tok = tiny
    save_checkpoint(run.checkpoints / "step_1", model, tok, state={"stage": "rl", "step": 1})
    save_checkpoint(run.checkpoints / "step_2", model, tok, state={"stage": "rl", "step": 2})
    weights = run.checkpoints / "step_2" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # one flipped bit, same size
    weights.write_bytes(bytes(data))
    (run.checkpoints / "step_10").mkdir()  # a SIGKILL on main left step_10/ holding only config.json
    (run.checkpoints / "step_10" / "config.json").write_text("{}")
    for odd in ("step_", "step_abc", "step_3.bak", "notes.txt", "step_99999999999999999999"):
        (run.checkpoints / odd).mkdir()
    (run.checkpoints / ".tmp-step_4-123").mkdir()  # an interrupted write: ignored silently
    said = []
    assert run.latest_checkpoint(say=said.append) == run.checkpoints / "step_1"
    reasons = dict(run.skipped_checkpoints)
    assert "no MANIFEST.json" in reasons["step_10"] and "SHA-256" in reasons["step_2"]
    assert all("step_N" in reasons[o] for o in ("step_", "step_abc", "step_3.bak", "notes.txt"))
    assert len(said) == len(reasons) and not any(".tmp-" in s for s in said)


def test_no_complete_checkpoint_is_none(run):
    assert run.latest_checkpoint(say=lambda m: None) is None
    (run.checkpoints / "step_1").mkdir()
    assert run.latest_checkpoint(say=lambda m: None) is None


def test_saving_the_same_step_twice_keeps_one_complete_checkpoint(tiny, run):
    model, tok = tiny
    for _ in range(2):
        save_checkpoint(run.checkpoints / "step_5", model, tok, state={"stage": "rl", "step": 5})
    assert [p.name for p in run.checkpoints.iterdir()] == ["step_5"]
    assert verify_checkpoint(run.checkpoints / "step_5") == ""


def test_rollback_removes_what_was_written_after_the_marks(run):
    run.store.add_trajectories([_traj("a"), _traj("b")], stage="rl", step=0)
    run.log_metrics({"loss": 1.0}, stage="rl", step=1)
    run.store.add_event("x")
    marks = run.marks()
    run.store.add_trajectories([_traj("c")], stage="rl", step=1)  # the killed step's writes
    run.log_metrics({"loss": 2.0, "kl": 0.1}, stage="rl", step=2)
    run.store.add_event("y")
    removed = run.rollback(marks)
    assert removed["trajectories"] == 1 and removed["spans"] == 1 and removed["metrics"] == 2 and removed["events"] == 1
    assert [t.trajectory_id for t in run.store.trajectories()] == ["a", "b"]
    assert [m["step"] for m in run.read_metrics()] == [1]
    run.store.add_trajectories([_traj("c")], stage="rl", step=1)  # the redone step: no key clash
    assert run.store.count() == 3 and run.store.integrity() == "ok"


def test_store_metadata_equals_the_contract_serializer():
    t = _traj("m")
    t.verifier_output = {"nested": {"a": [1, 2]}}
    assert json.loads(_meta_json(t)) == json.loads(json.dumps(metadata_dict(t)))
