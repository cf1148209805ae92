"""The cgroup v2 worker group, laid out in a stand-in directory tree (this host's memory controller
is on cgroup v1, so no real v2 group can be made here): which hierarchy is chosen, what is written,
what is delegated to the sandbox user, and that everything is removed again."""

from __future__ import annotations

import os

import pytest

from tracerl.sandbox import cgroups

V2_ONLY = "0::/job\n"
HYBRID = "4:memory:/job\n8:pids:/job\n0::/\n"


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A fake /sys/fs/cgroup whose unified group /job delegates memory and pids to its children."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "cgroup.subtree_control").write_text("cpu memory pids\n")
    monkeypatch.setattr(cgroups, "ROOT", str(tmp_path))
    monkeypatch.setattr(cgroups, "_proc_cgroup", lambda: V2_ONLY)
    monkeypatch.setattr(cgroups, "_swept", True)
    chowned = []
    monkeypatch.setattr(os, "chown", lambda path, uid, gid: chowned.append((os.path.relpath(path, job), uid)))
    return job, chowned


def test_the_v2_hierarchy_is_chosen_only_where_it_delegates_memory_and_pids(tree, monkeypatch):
    job, _ = tree
    assert cgroups.version() == 2 and cgroups._v2_path() == str(job)
    (job / "cgroup.subtree_control").write_text("cpu pids\n")  # memory not delegated: unusable
    assert cgroups.version() is None
    monkeypatch.setattr(cgroups, "_proc_cgroup", lambda: HYBRID)  # v1 memory and pids mounted: v1 wins
    assert cgroups.version() == 1


def test_a_v2_worker_group_caps_its_calls_and_parks_the_worker_in_a_leaf(tree):
    job, chowned = tree
    g = cgroups.WorkerGroup(1 << 30, 4096, owner=65534)
    group = job / os.path.basename(g.memory_dir)
    assert g.version == 2 and g.dirs == [str(group)]
    assert (group / "memory.max").read_text() == str(1 << 30) and (group / "pids.max").read_text() == "4096"
    assert (group / "cgroup.subtree_control").read_text() == "+memory +pids"  # per-call groups get both
    assert g.procs_files == [str(group / "zygote" / "cgroup.procs")]  # the worker joins the leaf, not the group
    name = group.name
    assert sorted(chowned) == sorted((p, 65534) for p in (
        name, f"{name}/cgroup.procs", f"{name}/cgroup.threads", f"{name}/cgroup.subtree_control",
        f"{name}/zygote", f"{name}/zygote/cgroup.procs"))
    assert not any(p.endswith(("memory.max", "pids.max")) for p, _ in chowned)  # its limits stay root's
    (group / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\n")
    (group / "memory.peak").write_text("12345\n")
    assert g.oom_kills() == 2 and g.peak_memory_bytes() == 12345
    (group / "call-7").mkdir()  # a per-call group the worker left behind
    for f in group.iterdir():
        if f.is_file():
            f.unlink()
    (group / "zygote" / "cgroup.procs").unlink(missing_ok=True)
    g.remove(wait_s=0.1)
    assert not group.exists() and g.dirs == []
