"""The second round of attacks (issue 17): forged infrastructure failures, one call hurting its
neighbours, memory that escaped the limits, state carried between calls, and caller inputs that
broke the sandbox instead of being refused. Each case failed on the main of 2026-12-01."""

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
from sandbox_helpers import SMALL

from tracerl.sandbox import cgroups

SIGNAL_EVERY = ("import os, signal\nfor sig in range(1, 65):\n    if sig in (9, 19):\n        continue\n"
                "    try:\n        os.kill(1, sig)\n    except OSError:\n        pass\n")


def test_sigint_to_init_does_not_forge_a_crash(box):
    """Attack: SIGINT to PID 1, whose Python kept its KeyboardInterrupt handler: init died and the
    call came back `crash`, which the trainer excludes instead of scoring 0."""
    r = box.run("import os, signal, time\nos.kill(1, signal.SIGINT)\ntime.sleep(0.1)\nraise SystemExit(3)")
    assert r.status == "error" and r.exit_code == 3, r


def test_every_signal_to_init_is_ignored(box):
    """Attack: every catchable signal at PID 1, then a normal ending. Init owns none of them: the
    program's own exit code comes back."""
    r = box.run(SIGNAL_EVERY + "import time\ntime.sleep(0.1)\nprint('done')")
    assert r.status == "ok" and r.stdout == "done\n", r


def test_alarm_spam_from_a_child_does_not_forge_a_crash(box):
    """Attack: a child sends SIGALRM to init in a tight loop while the parent exits with 1. On
    main a second alarm landed inside init's timeout handler in up to 6 of 6 tries."""
    code = ("import os, signal, time\nif os.fork() == 0:\n    while True:\n        try:\n"
            "            os.kill(1, signal.SIGALRM)\n        except OSError:\n            pass\n"
            "time.sleep(0.3)\nos._exit(1)")
    for _ in range(4):
        r = box.run(code)
        assert r.status == "error" and r.exit_code == 1, r


def test_pipes_kept_alive_in_an_scm_rights_cycle_do_not_hurt_neighbours(box):
    """Attack: send stdout and stderr into a unix socket pair, send each socket into the other and
    close them: the pipes stay open in an unreachable cycle after the call ends. The host used to
    wait for pipe EOF, declare the worker stuck and replace it, crashing concurrent calls."""
    attack = ("import os, socket\na, b = socket.socketpair()\n"
              "socket.send_fds(a, [b'x'], [1, 2])\nsocket.send_fds(a, [b'x'], [a.fileno(), b.fileno()])\n"
              "socket.send_fds(b, [b'x'], [a.fileno(), b.fileno()])\na.close()\nb.close()\nprint('bye')")
    innocent = "import time\ntime.sleep(0.2)\nprint('fine')"

    def timed(code):
        t0 = time.monotonic()
        return box.run(code), time.monotonic() - t0

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(timed, [attack if i % 2 else innocent for i in range(12)]))
    for i, (r, took) in enumerate(results):
        assert r.status == "ok" and r.stdout == ("bye\n" if i % 2 else "fine\n"), r
        assert took < SMALL.wall_s, took  # the status came from init's message, not pipe EOF


@pytest.mark.skipif(not cgroups.available()[0], reason=cgroups.available()[1])
def test_a_hog_that_lowers_its_oom_score_only_ends_its_own_call(box):
    """Attack: set oom_score_adj to -1000 (never the OOM killer's pick), then grow in three
    children past the call's memory. On main the OOM killer took innocent calls and the zygote.
    The call's own memory group confines the killer to the call; if it takes the call's init,
    the call is still `memory` (never `crash`), and a concurrent call is untouched."""
    hog = ("import os, time\nopen('/proc/self/oom_score_adj', 'w').write('-1000')\nfor i in range(3):\n"
           "    if os.fork() == 0:\n        b = bytearray(200 * 2**20)\n"
           "        for j in range(0, len(b), 4096):\n            b[j] = 1\n        time.sleep(2)\n"
           "        os._exit(0)\ntime.sleep(2)\nprint('survived')")
    limits = replace(SMALL, wall_s=5, cpu_s=5)
    with ThreadPoolExecutor(2) as pool:
        hogged = pool.submit(box.run, hog, limits=limits)
        fine = pool.submit(box.run, "import time\ntime.sleep(1)\nprint('fine')", limits=limits)
        r, other = hogged.result(), fine.result()
    assert r.status in ("memory", "ok") and r.status != "crash", r
    assert r.memory_peak_bytes <= SMALL.memory_bytes + SMALL.disk_bytes
    assert other.status == "ok" and other.stdout == "fine\n", other


@pytest.mark.skipif(not cgroups.available()[0], reason=cgroups.available()[1])
def test_memfd_memory_counts_against_the_call(box):
    """Attack: hold 960 MB in memfds (not mapped, so RLIMIT_AS never sees it) with 256 MB allowed.
    On main the call held all of it and reported 14 MB. A memory cgroup per call charges the
    pages: the call ends as `memory` and a concurrent innocent call is untouched."""
    hog = ("import os\nfds = []\nfor i in range(96):\n    fd = os.memfd_create('x')\n"
           "    os.write(fd, b'x' * (10 * 2**20))\n    fds.append(fd)\nprint('held 960 MB')")
    limits = replace(SMALL, wall_s=10, cpu_s=5, nofile=128, file_bytes=16 * 2**20)
    with ThreadPoolExecutor(2) as pool:
        hogged = pool.submit(box.run, hog, limits=limits)
        fine = pool.submit(box.run, "import time\ntime.sleep(0.5)\nprint('fine')", limits=limits)
        r, other = hogged.result(), fine.result()
    assert r.status == "memory" and "held" not in r.stdout, r
    assert 0 < r.memory_peak_bytes <= SMALL.memory_bytes + SMALL.disk_bytes
    assert other.status == "ok" and other.stdout == "fine\n", other


@pytest.mark.skipif(not cgroups.available()[0], reason=cgroups.available()[1])
def test_tmpfs_and_forked_memory_count_against_the_call(box):
    """Attack: three children each touch 200 MB (under the 256 MB address space each) while /tmp
    holds files. The call's group (memory_bytes + disk_bytes) never holds more: the kernel kills
    children at the cap and the parent sees them die."""
    code = ("import os, time\nopen('/tmp/f', 'wb').write(b'x' * 7 * 2**20)\nkids = []\nfor i in range(3):\n"
            "    pid = os.fork()\n    if pid == 0:\n        b = bytearray(200 * 2**20)\n"
            "        for j in range(0, len(b), 4096):\n            b[j] = 1\n        time.sleep(1)\n"
            "        os._exit(0)\n    kids.append(pid)\n"
            "print([os.waitstatus_to_exitcode(os.waitpid(k, 0)[1]) for k in kids])")
    r = box.run(code, limits=replace(SMALL, wall_s=10, cpu_s=5, file_bytes=8 * 2**20))
    # 7 MB of tmpfs + 3 x 200 MB > 264 MB: at most one child fits, e.g. [-9, 0, -9]
    assert r.status == "ok" and eval(r.stdout).count(-9) >= 2, r
    assert 0 < r.memory_peak_bytes <= SMALL.memory_bytes + SMALL.disk_bytes


def test_network_counters_do_not_carry_to_the_next_call(box):
    """Attack: leave marks in the network namespace's counters (failed sends raise OutNoRoutes) and
    read them in the next call. Each call gets a fresh namespace: the reader sees what a call
    that nobody preceded sees."""
    read = "print(open('/proc/net/snmp').read())"
    mark = ("import socket\nfor _ in range(50):\n    try:\n        socket.socket().connect(('10.1.2.3', 9))\n"
            "    except OSError:\n        pass\nprint(open('/proc/net/snmp').read())")
    before = box.run(read).stdout
    assert box.run(mark).stdout != before  # the marks land (Ip OutNoRoutes counts them)...
    after = [box.run(read).stdout for _ in range(3)]  # pooled namespaces came back in turn
    assert before and after == [before] * 3  # ...and no later call sees them


def test_a_call_cannot_use_up_a_shared_key_quota(box):
    """Attack: every call maps to the same host uid, whose key quota (200 keys) is shared. One
    call filling it made a concurrent call's add_key fail. Programs may not create keys at all,
    so one call's keys cannot change what another can do."""
    probe = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
             "r = libc.syscall(248, b'user', b'probe', b'x', 1, -3)\nprint(r > 0, ctypes.get_errno())")
    fill = ("import ctypes, time\nlibc = ctypes.CDLL(None, use_errno=True)\nn = 0\nfor i in range(300):\n"
            "    if libc.syscall(248, b'user', f'k{i}'.encode(), b'x' * 60, 60, -3) > 0:\n        n += 1\n"
            "print(n)\ntime.sleep(0.6)")
    alone = box.run(probe).stdout
    with ThreadPoolExecutor(2) as pool:
        filling = pool.submit(box.run, fill)
        time.sleep(0.3)
        beside = pool.submit(box.run, probe).result().stdout
        assert filling.result().stdout == "0\n"
    assert alone == beside and alone.startswith("False ")


# ---- caller inputs: refused as `blocked` with a reason, never a crash or an exception ----

@pytest.mark.parametrize("files, why", [
    ({"a": "x", "a/b": "y"}, "both a file and a directory"),
    ({"a/b": "y", "a": "x"}, "both a file and a directory"),
    ({"a\0b": "x"}, "NUL"),
    ({"x" * 300: "x"}, "255"),
    ({"ok.txt": "\ud800"}, "UTF-8"),
    ({7: "x"}, "str"),
    ({f"f{i}": "" for i in range(5000)}, "files"),
])
def test_bad_files_are_blocked(box, files, why):
    r = box.run("print('ran')", files=files)
    assert r.status == "blocked" and why in r.reason, r


def test_lone_surrogate_in_code_or_stdin_is_blocked(box):
    assert box.run("print('\ud800')").status == "blocked"
    r = box.run("print('x')", stdin="\udfff")
    assert r.status == "blocked" and "stdin" in r.reason


def test_many_small_files_are_counted_by_the_pages_they_take(box):
    """3000 one-byte files are 3 KB of data but 12 MB of tmpfs pages (8 MB disk): refused up front
    instead of failing inside the call's setup as `crash`."""
    r = box.run("pass", files={f"f{i}": "x" for i in range(3000)})
    assert r.status == "blocked" and "disk_bytes" in r.reason, r


class Shifty(Mapping):
    """A mapping that answers differently each time it is read."""

    def __init__(self):
        self.reads = 0

    def __iter__(self):
        self.reads += 1
        return iter(["ok.txt"] if self.reads == 1 else ["../../escape", "ok.txt"])

    def __len__(self):
        return 1

    def __getitem__(self, key):
        return "first" if self.reads <= 1 else "x" * 10**8


def test_a_mapping_that_changes_after_validation_runs_what_was_validated(box):
    r = box.run("import os\nprint(sorted(os.listdir('.')), open('ok.txt').read())", files=Shifty())
    assert r.status == "ok" and r.stdout == "['ok.txt'] first\n", r


def test_limits_of_the_wrong_type_are_blocked(box):
    r = box.run("pass", limits={"wall_s": 1})
    assert r.status == "blocked" and "Limits" in r.reason
