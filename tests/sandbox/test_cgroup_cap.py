"""The total-memory cap of a worker's calls (cgroup v1, where the host allows it)."""

import os

import pytest

from tracerl.sandbox import Limits, Sandbox, cgroups

pytestmark = pytest.mark.skipif(not cgroups.available()[0], reason=cgroups.available()[1])

CAP = 320 * 2**20


@pytest.fixture(scope="module")
def capped():
    with Sandbox(total_memory_bytes=CAP) as box:
        if box.level != "full":
            pytest.skip("full isolation unavailable here")
        box.run("pass")
        yield box


def test_forked_memory_stays_under_the_cap(capped):
    """Attack: six children each touch 150 MB — within each process's 256 MB address space, so
    RLIMIT_AS never fires, but 900 MB in all. The cgroup holds the call to the cap; the kernel
    kills children (first in line: programs raised their OOM score) and the worker survives."""
    code = ("import os, time\nkids = []\nfor i in range(6):\n    pid = os.fork()\n    if pid == 0:\n"
            "        b = bytearray(150 * 2**20)\n        for j in range(0, len(b), 4096):\n            b[j] = 1\n"
            "        time.sleep(0.5)\n        os._exit(0)\n    kids.append(pid)\n"
            "print([os.waitstatus_to_exitcode(os.waitpid(k, 0)[1]) for k in kids])")
    r = capped.run(code, limits=Limits(wall_s=10, cpu_s=10, memory_bytes=256 * 2**20, nproc=16))
    killed = eval(r.stdout).count(-9)  # e.g. [0, -9, -9, -9, -9, 0]: at most two fit in 320 MB
    assert r.status == "ok" and killed >= 3
    assert capped._worker.group.peak_memory_bytes() <= CAP
    assert capped.run("print('alive')").stdout == "alive\n"


def test_filling_tmpfs_past_the_cap_is_a_memory_outcome(capped):
    """Attack: tmpfs pages count against no rlimit; write 600 MB of files into /tmp (disk_bytes
    allows 1 GB). The cgroup charges the pages; the writer is OOM-killed and reported as memory."""
    r = capped.run("for i in range(60):\n    open(f'/tmp/x{i}', 'wb').write(b'x' * 10 * 2**20)\nprint('wrote')",
                   limits=Limits(wall_s=10, cpu_s=10, disk_bytes=2**30))
    assert r.status == "memory" and "total memory cap" in r.reason and r.stdout == ""
    assert capped.run("print('alive')").stdout == "alive\n"


def test_groups_are_removed_with_the_worker():
    box = Sandbox(total_memory_bytes=CAP)
    box.run("pass")
    dirs = list(box._worker.group.dirs)
    assert all(os.path.isdir(d) for d in dirs)
    box.close()
    assert not any(os.path.exists(d) for d in dirs)


def test_the_report_states_the_cap(capped):
    assert any("cgroup" in line for line in capped.isolation_report()["enforced"])
    with Sandbox(total_memory_bytes=None) as uncapped:
        assert any("not capped" in line for line in uncapped.isolation_report()["missing"])
