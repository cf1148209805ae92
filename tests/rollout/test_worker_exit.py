"""A rollout worker never outlives the learner that started it: killed with SIGKILL, the learner runs no
clean-up, and the worker's own watchdog (`exit_with_parent`) ends it once it is re-parented."""

import os
import signal
import subprocess
import sys
import time

CHILD = ("import os, time; from tracerl.rollout.workers import exit_with_parent; "
         "exit_with_parent(os.getppid(), 0.05); print('ready', flush=True); time.sleep(120)")
PARENT = ("import subprocess, sys, time; "
          f"c = subprocess.Popen([sys.executable, '-c', {CHILD!r}], stdout=subprocess.PIPE, text=True); "
          "assert c.stdout.readline() == 'ready\\n'; print(c.pid, flush=True); time.sleep(120)")


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # exited (a zombie awaiting its reaper)
    except FileNotFoundError:
        return True


def test_a_worker_exits_when_its_learner_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert not _gone(child)
    time.sleep(0.3)
    assert not _gone(child)  # the watchdog leaves a worker whose learner lives alone
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 10
    while not _gone(child) and time.time() < deadline:
        time.sleep(0.05)
    gone = _gone(child)
    if not gone:
        os.kill(child, signal.SIGKILL)
    assert gone, "the worker outlived its killed learner"
