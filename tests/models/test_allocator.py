"""run.allocator: `keep` makes a process reuse freed memory instead of page-faulting it in again; `system` does not.
Each case runs in its own interpreter (glibc's settings are process-wide and are never undone)."""

import json
import subprocess
import sys

import pytest

CHURN = r"""
import json, sys, torch
from tracerl.models.allocator import configure_allocator, page_faults
applied = configure_allocator(sys.argv[1])
def churn():  # an RL step in small: the same 100 MB blocks freed and allocated again
    for _ in range(10):
        x = torch.ones(25_000_000); y = x * 2; del x, y
churn()
f0 = page_faults(); churn(); faults = page_faults() - f0
import subprocess
child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('GLIBC_TUNABLES', ''))"],
                       capture_output=True, text=True).stdout.strip()
print(json.dumps({"applied": applied, "faults": faults, "child_tunables": child}))
"""

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings")


def _churn(mode: str) -> dict:
    env = {k: v for k, v in __import__("os").environ.items() if k != "GLIBC_TUNABLES"}
    out = subprocess.run([sys.executable, "-c", CHURN, mode], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_keep_reuses_freed_memory_and_system_faults_it_in_again():
    keep, system = _churn("keep"), _churn("system")
    # 10 rounds x 2 blocks x 100 MB = 2 GB touched: ~488k fresh 4 KiB pages when every block is a new mapping;
    # kept, the blocks are reused (0 faults alone; the kernel's own page activity during a full suite has added
    # up to ~73k, hence a ratio rather than a count)
    assert system["applied"] is False and system["faults"] > 400_000
    assert keep["applied"] is True and keep["faults"] < system["faults"] / 4
    # processes started after it (workers, learner ranks, a local Ray runtime) inherit the settings
    assert "glibc.malloc.mmap_max=0" in keep["child_tunables"] and system["child_tunables"] == ""


def test_unknown_mode_is_refused():
    from tracerl.models.allocator import configure_allocator

    with pytest.raises(ValueError, match="keep or system"):
        configure_allocator("jemalloc")


def test_recipe_refuses_an_unknown_allocator():
    from tracerl.config import load_recipe
    from tracerl.errors import UserError

    with pytest.raises((UserError, ValueError), match="allocator"):
        load_recipe("smoke", ["run.allocator=tcmalloc"])
