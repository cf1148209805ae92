"""The processes of a warm call: one Python process (the program) in a PID namespace whose init
is a pause() clone of the zygote. These check what that design must still give (docs/sandbox.md)."""

from sandbox_helpers import SMALL, descendants, settles

from tracerl.sandbox import Limits

ORPHANS = ("import os, time\nfor i in range(40):\n    if os.fork() == 0:\n        if os.fork() == 0:\n"
           "            os._exit(0)\n        os._exit(0)\n    os.wait()\ntime.sleep(0.05)\n"
           "states = [open(f'/proc/{p}/stat').read().split()[2] for p in os.listdir('/proc') if p.isdigit()]\n"
           "print(len(states), states.count('Z'))\n"
           "import subprocess\nprint(subprocess.run(['echo', 'own child'], capture_output=True).stdout.decode())")


def test_orphans_are_reaped_while_the_call_runs(box):
    """40 double-forked orphans, one after another, with nproc=16: each is reaped when it exits
    (they would be zombies counting against nproc until the call ended if init did not reap),
    and the program's own children are still its to wait for."""
    r = box.run(ORPHANS, limits=Limits(wall_s=5, cpu_s=2, nproc=16, memory_bytes=SMALL.memory_bytes))
    assert r.status == "ok" and r.stderr == "" and r.stdout == "2 0\nown child\n\n", r


def test_nothing_accumulates_across_calls(box):
    """Ended, timed-out and crashed-in-setup calls leave no process (init, program, zombie) behind."""
    idle = len(descendants(box.worker_pid()))
    results = box.run_many(["pass", "import time\ntime.sleep(5)", "import os\nos._exit(3)"] * 4, concurrency=6)
    assert [r.status for r in results] == ["ok", "timeout", "error"] * 4
    assert settles(box.worker_pid(), idle)


def test_pid_one_is_not_a_python_process_the_program_can_reach(box):
    """The call's init sleeps in pause() and is not dumpable: its memory, fds and environment
    are closed to the program, and its signals (all of them) are dropped."""
    r = box.run("import os, signal\nprint(open('/proc/1/stat').read().split()[2])\n"
                "for sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM):\n    os.kill(1, sig)\n"
                "for name in ('mem', 'environ', 'maps'):\n    try:\n        open(f'/proc/1/{name}', 'rb').read(1)\n"
                "    except OSError as e:\n        print(name, 'refused')\nprint(open('/proc/1/stat').read().split()[2])")
    assert r.status == "ok" and r.stdout == "S\nmem refused\nenviron refused\nmaps refused\nS\n", r
