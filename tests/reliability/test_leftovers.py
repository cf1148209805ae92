"""Leftovers and overwrites (issue 38): half-written checkpoint folders and a killed trainer's sandbox
cgroups are swept at start/resume, and `tracerl train run.dir=EXISTING_RUN` without `--resume` is refused
in one sentence without touching the existing run."""

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracerl.cli import main as cli
from tracerl.sandbox import cgroups
from tracerl.store import RunDir


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else b"<dir>")
            for p in sorted(root.rglob("*"))}


def test_existing_run_dir_is_refused_and_untouched(tmp_path):
    run = RunDir(tmp_path / "run", create=True)
    run.write_config({"run": {"seed": 0}})
    run.store.add_event("start", "an earlier run", stage="rl", step=0)
    run.close()
    (run.checkpoints / "step_1").mkdir()
    (run.checkpoints / "step_1" / "model.safetensors").write_bytes(b"old weights")
    before = _tree(run.path)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli(["train", "smoke", f"run.dir={run.path}", "rl.steps=1"])
    assert code == 2
    lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
    assert len(lines) == 1 and "already holds a run" in lines[0] and "--resume" in lines[0], err.getvalue()
    assert _tree(run.path) == before  # no appended store rows, no replaced checkpoint, no new file


def test_an_empty_or_new_run_dir_is_accepted(tmp_path):
    RunDir.refuse_existing(tmp_path / "new")  # does not exist yet
    (tmp_path / "empty").mkdir()
    RunDir.refuse_existing(tmp_path / "empty")


def test_interrupted_checkpoint_writes_are_swept_on_resume(tmp_path):
    run = RunDir(tmp_path / "run", create=True)
    dead, alive = _dead_pid(), os.getppid()
    tmp = run.checkpoints / f".tmp-step_4-{dead}"
    tmp.mkdir()
    (tmp / "model.safetensors").write_bytes(b"half")
    old = run.checkpoints / f".old-step_3-{dead}"  # killed between the two renames: step_3 is missing
    old.mkdir()
    (old / "MANIFEST.json").write_text("{}")
    busy = run.checkpoints / f".tmp-step_5-{alive}"  # a live writer's folder is not ours to remove
    busy.mkdir()
    base = run.path / f".tmp-base_model-{dead}"  # the LoRA base weights, half written
    base.mkdir()
    done = run.sweep_leftovers()
    assert sorted(done) == sorted([tmp.name, old.name, base.name])
    assert not tmp.exists() and not base.exists() and busy.exists()
    assert (run.checkpoints / "step_3" / "MANIFEST.json").exists()  # the replaced checkpoint is put back
    run.close()


def test_stale_cgroups_are_removed_children_first(tmp_path):
    """A fake hierarchy (plain folders behave as cgroups do for rmdir: a parent with any child folder stays)."""
    dead = _dead_pid()
    stale = tmp_path / f"tracerl-sandbox-{dead}-0"
    (stale / "call-3").mkdir(parents=True)  # the empty call-N child that used to block the rmdir
    (stale / "zygote").mkdir()
    (stale / "call-4" / "nested").mkdir(parents=True)
    live = tmp_path / f"tracerl-sandbox-{os.getpid()}-0"
    (live / "call-1").mkdir(parents=True)
    other = tmp_path / f"someone-else-{dead}-0"
    other.mkdir()
    odd = tmp_path / f"tracerl-sandbox-{dead}-x"
    odd.mkdir()
    assert cgroups.sweep_stale([str(tmp_path)]) == [str(stale)]
    assert not stale.exists() and live.exists() and other.exists() and odd.exists()


@pytest.mark.skipif(not cgroups.available()[0] or cgroups.version() != 1, reason="needs writable cgroup v1 hierarchies")
def test_real_stale_cgroup_with_a_call_child_is_swept():
    dead = _dead_pid()
    base = cgroups._own_path("memory")
    group = os.path.join(base, f"tracerl-sandbox-{dead}-0")
    os.makedirs(os.path.join(group, "call-7"))
    try:
        assert group in cgroups.sweep_stale()
        assert not os.path.exists(group)
    finally:
        cgroups.remove_tree(group)
