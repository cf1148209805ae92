"""Adversarial programs that try to exhaust a resource. Each states its attack and the outcome.

Limits (conftest.SMALL): 1 s wall, 1 s CPU, 256 MB address space, 16 processes, 1 MB per file,
32 fds, 8 KB of output per stream, 8 MB of private disk.
"""

import time
from dataclasses import replace

from sandbox_helpers import SMALL, descendants, settles


def test_infinite_loop_is_killed_at_the_wall_clock(box):
    """Attack: `while True: pass` — burn the CPU forever."""
    t0 = time.monotonic()
    r = box.run("while True:\n    pass")
    assert r.status == "timeout"
    assert time.monotonic() - t0 < SMALL.wall_s + 1.5
    assert "limit" in r.reason


def test_cpu_limit_is_enforced_by_the_kernel(box):
    """Attack: a busy loop with a generous wall clock; RLIMIT_CPU (1 s) must stop it first."""
    r = box.run("while True:\n    pass", limits=replace(SMALL, wall_s=10, cpu_s=1))
    assert r.status == "timeout"
    assert "CPU" in r.reason  # SIGXCPU at 1 s of CPU, long before the 10 s wall clock
    assert 0.5 <= r.cpu_s <= 2.5


def test_sleep_is_killed_at_the_wall_clock(box):
    """Attack: `time.sleep(100)` — hold a slot without using CPU."""
    r = box.run("import time\ntime.sleep(100)")
    assert r.status == "timeout" and r.cpu_s < 0.5


def test_reading_stdin_never_blocks(box):
    """Attack: wait forever on stdin. stdin is a finite file, so the read returns at EOF."""
    r = box.run("import sys\nprint(repr(sys.stdin.read()), repr(sys.stdin.read()))", stdin="abc")
    assert r.status == "ok" and r.stdout == "'abc' ''\n"


def test_fork_bomb_is_capped_and_killed(box):
    """Attack: fork in a loop, ignoring failures. RLIMIT_NPROC caps the processes, the PID
    namespace teardown kills them all at the wall clock, and nothing outlives the call."""
    idle = len(descendants(box.worker_pid()))
    r = box.run("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass")
    assert r.status == "timeout"
    assert settles(box.worker_pid(), idle)


def test_process_count_never_exceeds_nproc(box):
    """Attack: start 100 sleeping children. At most `nproc` processes exist at once."""
    code = ("import os, time\nmade = 0\nfor _ in range(100):\n    try:\n        if os.fork() == 0:\n"
            "            time.sleep(5)\n            os._exit(0)\n        made += 1\n    except OSError:\n"
            "        break\nprint(made)")
    r = box.run(code)
    assert r.status == "ok"
    assert 0 < int(r.stdout) < SMALL.nproc


def test_ten_gigabyte_allocation_is_a_memory_outcome(box):
    """Attack: allocate 10 GB at once."""
    r = box.run("x = bytearray(10 * 2**30)")
    assert r.status == "memory" and "MemoryError" in r.stderr


def test_gradual_allocation_is_a_memory_outcome(box):
    """Attack: grow a list of 1 MB blocks until something gives."""
    r = box.run("blocks = []\nwhile True:\n    blocks.append(bytearray(2**20))", limits=replace(SMALL, wall_s=5, cpu_s=4))
    assert r.status == "memory"


def test_disk_fill_with_one_file_hits_the_file_size_limit(box):
    """Attack: write one endless file. RLIMIT_FSIZE (1 MB) stops it with EFBIG."""
    r = box.run("f = open('big', 'wb')\nwhile True:\n    f.write(b'x' * 65536)")
    assert r.status == "error" and "File too large" in r.stderr


def test_disk_fill_with_many_files_hits_the_tmpfs_size(box):
    """Attack: write many 512 KB files into /tmp. The private tmpfs (8 MB) fills: ENOSPC."""
    r = box.run("i = 0\nwhile True:\n    open(f'/tmp/f{i}', 'wb').write(b'x' * 2**19)\n    i += 1")
    assert r.status == "error" and "No space left" in r.stderr


def test_inode_exhaustion_is_bounded(box):
    """Attack: create empty files until the filesystem refuses (inodes, not bytes)."""
    r = box.run("i = 0\nwhile True:\n    open(f'e{i}', 'w').close()\n    i += 1", limits=replace(SMALL, wall_s=5, cpu_s=4))
    assert r.status == "error" and "No space left" in r.stderr


def test_file_descriptor_exhaustion_hits_nofile(box):
    """Attack: open /dev/null until the process runs out of descriptors."""
    r = box.run("fs = []\nwhile True:\n    fs.append(open('/dev/null'))")
    assert r.status == "error" and "Too many open files" in r.stderr


def test_gigabytes_of_stdout_are_cut_at_the_cap(box):
    """Attack: print without end. Kept: exactly `output_bytes`; the call is killed early."""
    t0 = time.monotonic()
    r = box.run("while True:\n    print('x' * 1000)")
    assert r.status == "output_limit" and r.stdout_truncated and not r.stderr_truncated
    assert len(r.stdout) == SMALL.output_bytes
    assert time.monotonic() - t0 < SMALL.wall_s


def test_gigabytes_of_stderr_are_cut_at_the_cap(box):
    """Attack: flood stderr instead of stdout."""
    r = box.run("import sys\nwhile True:\n    sys.stderr.write('y' * 4096)")
    assert r.status == "output_limit" and r.stderr_truncated and len(r.stderr) == SMALL.output_bytes


def test_output_exactly_at_the_cap_is_not_truncated(box):
    """Boundary: 8192 bytes of output is allowed, 8193 is not."""
    ok = box.run(f"import sys\nsys.stdout.write('z' * {SMALL.output_bytes})")
    over = box.run(f"import sys\nsys.stdout.write('z' * {SMALL.output_bytes + 1})")
    assert ok.status == "ok" and not ok.stdout_truncated and len(ok.stdout) == SMALL.output_bytes
    assert over.status == "output_limit" and over.stdout_truncated


def test_threads_count_against_nproc(box):
    """Attack: spawn 200 threads. Thread creation fails at the process cap (threads are tasks);
    the address-space limit is raised here so that the process cap is the one that binds."""
    code = ("import threading, time\nthreading.stack_size(256 * 1024)\nn = 0\ntry:\n    for _ in range(200):\n"
            "        threading.Thread(target=time.sleep, args=(0.3,), daemon=True).start()\n        n += 1\n"
            "except RuntimeError:\n    pass\nprint(n)")
    r = box.run(code, limits=replace(SMALL, memory_bytes=8 * 2**30, wall_s=5))
    assert r.status == "ok", r
    assert SMALL.nproc // 2 <= int(r.stdout) < SMALL.nproc  # the program itself is one of the 16
