"""Adversarial programs that try to reach outside their call: the host's files, processes,
network, environment, the grader, the sandbox's own machinery, or the next call."""

import os
import signal

import pytest

from tracerl.sandbox import Sandbox

from sandbox_helpers import SMALL, descendants, settles


@pytest.mark.parametrize("path", ["/usr/evil", "/etc/evil", "/evil", "/bin/evil", "/dev/evil", "/proc/evil"])
def test_writes_to_system_paths_fail(box, path):
    """Attack: create a file in a system directory."""
    r = box.run(f"open({path!r}, 'w').write('owned')")
    assert r.status == "error"
    assert "Read-only file system" in r.stderr or "No such file" in r.stderr or "Permission denied" in r.stderr
    assert not os.path.exists(path) or path.startswith("/proc")


def test_writes_outside_the_work_dir_stay_in_the_call(box, tmp_path):
    """Attack: climb out of /work with ../ and write where the host keeps its files."""
    target = tmp_path / "escaped.txt"
    r = box.run(f"import os\nos.makedirs('../../{target.parent}', exist_ok=True)\n"
                f"open('../../{target}', 'w').write('owned')")
    assert not target.exists()
    assert r.status in ("ok", "error")


def test_network_connect_fails(box):
    """Attack: open a TCP connection to a public address."""
    r = box.run("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=0.5)")
    assert r.status == "error" and "unreachable" in r.stderr.lower()


def test_dns_resolution_fails(box):
    """Attack: resolve a host name (exfiltration through DNS)."""
    r = box.run("import socket\nprint(socket.getaddrinfo('example.com', 80))")
    assert r.status == "error" and "gaierror" in r.stderr


def test_no_network_interface_is_up(box):
    """Attack: look for any interface to use. Only a loopback exists, and it is down."""
    r = box.run("import socket\nprint([n for _, n in socket.if_nameindex()])\n"
                "s = socket.socket()\ns.settimeout(0.2)\ns.connect(('127.0.0.1', 22))")
    assert r.stdout.strip() == "['lo']" and r.status == "error"


def test_host_environment_is_not_visible():
    """Attack: dump os.environ looking for the host's secrets (API keys, tokens)."""
    os.environ["TRACERL_TEST_SECRET"] = "hunter2-secret"
    try:
        with Sandbox(limits=SMALL) as fresh:
            r = fresh.run("import os\nprint(sorted(os.environ.items()))\nprint(open('/proc/1/environ').read())")
    finally:
        del os.environ["TRACERL_TEST_SECRET"]
    assert "hunter2-secret" not in r.stdout + r.stderr
    assert "TRACERL_TEST_SECRET" not in r.stdout + r.stderr


def test_host_processes_are_not_visible(box):
    """Attack: list /proc to find the trainer or grader and read their memory or command lines."""
    r = box.run("import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    assert r.status == "ok" and r.stdout.strip() == "[1, 2]"  # its init and itself, nothing else
    r = box.run(f"print(open('/proc/{os.getpid()}/cmdline').read())")
    assert r.status == "error" and "No such file" in r.stderr


def test_grader_files_are_not_reachable(box, tmp_path):
    """Attack: read the hidden tests or this very test file by absolute path."""
    hidden = tmp_path / "hidden_tests.py"
    hidden.write_text("assert solve() == 42\n")
    for path in (str(hidden), __file__, "/root/.bashrc", "/work"):
        r = box.run(f"import os\np = {path!r}\nprint(open(p).read() if os.path.isfile(p) else os.listdir(p))")
        assert "assert solve" not in r.stdout and "def test_" not in r.stdout, path
        assert r.status == "error" or r.stdout.strip() == "[]", (path, r)


def test_signalling_init_and_everyone_does_not_end_the_sandbox(box):
    """Attack: SIGKILL PID 1 (its init), the parent, its process group and every process (-1)."""
    code = ("import os, signal\nfor target in (1, os.getppid()):\n    try:\n        os.kill(target, signal.SIGKILL)\n"
            "    except OSError as e:\n        print('refused', e.errno)\ntry:\n    os.kill(-1, signal.SIGKILL)\n"
            "except OSError as e:\n    print('refused', e.errno)\nprint('alive')")
    r = box.run(code)
    assert r.status in ("ok", "error")
    assert box.run("print(2 + 2)").stdout == "4\n"


def test_alarm_to_init_changes_nothing(box):
    """Attack: SIGALRM to PID 1 (init once timed the call with it). Init ignores every signal a
    program can send it, so the call runs on to its own end."""
    r = box.run("import os, signal, time\nos.kill(1, signal.SIGALRM)\ntime.sleep(0.2)\nprint('reached')")
    assert r.status == "ok" and r.stdout == "reached\n"


def test_init_cannot_be_ptraced(box):
    """Attack: PTRACE_ATTACH to init to forge the result message."""
    r = box.run("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                "print(libc.ptrace(16, 1, 0, 0), ctypes.get_errno())\nimport os\nprint(os.listdir('/proc/1/fd'))")
    assert r.stdout.startswith("-1 1\n") and "Permission denied" in r.stderr


def test_no_capabilities_and_no_privilege_gain(box):
    """Attack: use root-like powers (capabilities, setuid, mount) inside the call."""
    r = box.run("st = open('/proc/self/status').read()\nprint([l for l in st.splitlines() if l.startswith(('Cap', 'NoNewPrivs'))])\n"
                "import os\ntry:\n    os.setuid(0)\nexcept OSError as e:\n    print('setuid refused')")
    assert r.status == "ok"
    for name in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert f"{name}:\\t0000000000000000" in r.stdout
    assert "NoNewPrivs:\\t1" in r.stdout and "setuid refused" in r.stdout


def test_only_stdio_file_descriptors_are_inherited(box):
    """Attack: look for inherited descriptors (the sandbox's control socket, host files)."""
    r = box.run("import os\nprint(sorted(int(fd) for fd in os.listdir('/proc/self/fd')))")
    assert r.stdout.strip() == "[0, 1, 2, 3]"  # 3 is the directory listdir itself opened


def test_sigterm_ignoring_double_forked_daemon_dies_with_the_call(box):
    """Attack: double-fork a daemon that ignores SIGTERM and sleeps, then return at once."""
    code = ("import os, signal, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n        time.sleep(60)\n    os._exit(0)\n"
            "time.sleep(0.1)\nprint('parent done')")
    idle = len(descendants(box.worker_pid()))
    r = box.run(code)
    assert r.status == "ok" and r.stdout == "parent done\n"
    assert settles(box.worker_pid(), idle), "a daemon outlived its call"


def test_state_does_not_leak_to_the_next_call(box):
    """Attack: leave files in /tmp, /work and /dev/shm, patch preloaded modules and builtins,
    set environment variables, then look for any of it in the next call."""
    first = box.run("import builtins, math, os, sys\nopen('/tmp/left', 'w').write('1')\nopen('left', 'w').write('1')\n"
                    "open('/dev/shm/left', 'w').write('1')\nmath.pi = 3\nbuiltins.LEAK = 1\nos.environ['LEAK'] = '1'\n"
                    "sys.modules['leak'] = math\nprint('planted')")
    assert first.stdout == "planted\n"
    second = box.run("import builtins, math, os, sys\nprint(os.listdir('/tmp'), os.listdir('.'), os.listdir('/dev/shm'),\n"
                     "      math.pi, hasattr(builtins, 'LEAK'), 'LEAK' in os.environ, 'leak' in sys.modules)")
    assert second.stdout == f"[] [] [] {3.141592653589793} False False False\n"


def test_concurrent_calls_cannot_talk(box):
    """Attack: one call listens on an abstract unix socket, a concurrent one tries to connect."""
    listen = ("import socket, time\ns = socket.socket(socket.AF_UNIX)\ns.bind('\\0tracerl-leak')\ns.listen()\n"
              "s.settimeout(0.8)\ntry:\n    s.accept()\n    print('contacted')\nexcept OSError:\n    print('alone')")
    connect = ("import socket, time\nfor _ in range(20):\n    try:\n        c = socket.socket(socket.AF_UNIX)\n"
               "        c.connect('\\0tracerl-leak')\n        print('connected')\n        break\n"
               "    except OSError:\n        time.sleep(0.02)\nelse:\n    print('refused')")
    a, b = box.run_many([listen, connect], concurrency=2)
    assert a.stdout == "alone\n" and b.stdout == "refused\n"


def test_host_survives_a_batch_of_attacks_at_once(box):
    """Attack: eight hostile programs in flight together; each gets its own outcome."""
    codes = ["while True: pass", "x = bytearray(10 * 2**30)", "while True: print('x' * 999)",
             "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass", "import time; time.sleep(9)",
             "print('fine')", "raise SystemExit(3)", "import os; os.kill(os.getpid(), 9)"]
    results = box.run_many(codes, concurrency=8)
    assert [r.status for r in results] == ["timeout", "memory", "output_limit", "timeout", "timeout", "ok", "error", "error"]
    assert results[6].exit_code == 3 and results[7].exit_code == -signal.SIGKILL


@pytest.mark.parametrize("code", ["import os\nos._exit(1)", "import os\nos.close(3) if False else os._exit(3)",
                                  "import os\nos.kill(os.getpid(), 9)", "import os\nfor fd in range(3, 64):\n"
                                  "    try:\n        os.close(fd)\n    except OSError:\n        pass\nos._exit(1)"])
def test_a_program_cannot_pass_itself_off_as_an_infrastructure_crash(box, code):
    """Attack: end abruptly, hoping to be reported as `crash` (excluded from training instead of
    penalised). Only init may report a crash, and only before the program's code has started."""
    assert box.run(code).status == "error"


def test_no_new_user_namespace_to_regain_capabilities(box):
    """Attack: create a user namespace (capabilities again inside it) and mount a 4 GB tmpfs,
    which would escape the memory and disk limits; or unshare any namespace directly."""
    code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "for flags in (0x10000000, 0x10000000 | 0x20000, 0x20000, 0x40000000, 0x20000000):\n"
            "    print(libc.unshare(flags), ctypes.get_errno())\n"
            "print(libc.mount(b'none', b'/tmp', b'tmpfs', 0, b'size=4g'), ctypes.get_errno())")
    r = box.run(code)
    lines = r.stdout.split("\n")[:6]
    assert all(line.startswith("-1 ") for line in lines), r.stdout  # every attempt refused
    assert lines[0] == "-1 28" and lines[5] == "-1 1"  # ENOSPC: user namespaces capped at 0; EPERM


def test_kernel_keyrings_do_not_carry_state_between_calls(box):
    """Attack: store data in the kernel's session/user keyrings (or in a key's description, which
    /proc/keys shows to the same uid) and read it back in the next call. The key system calls
    are refused (EPERM, a seccomp filter), so nothing can be planted or looked up."""
    plant = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nfor ring in (-3, -4, -5):\n"
             "    print(libc.syscall(248, b'user', f'leak{ring}'.encode(), b'secret', 6, ring), ctypes.get_errno())")
    look = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nfor ring in (-3, -4, -5):\n"
            "    print(libc.syscall(250, 10, ring, b'user', f'leak{ring}'.encode(), 0))\n"
            "print(repr(open('/proc/keys').read()))")
    assert box.run(plant).stdout == "-1 1\n-1 1\n-1 1\n"  # EPERM
    assert box.run(look).stdout == "-1\n-1\n-1\n''\n"


def test_concurrent_calls_do_not_share_ptys(box):
    """Attack: open a pseudo-terminal in one call and look for it from a concurrent one (a
    shared devpts would be a channel between calls)."""
    opener = ("import os, time\nfd = os.open('/dev/ptmx', os.O_RDWR)\nprint(sorted(os.listdir('/dev/pts')))\n"
              "time.sleep(0.8)")
    looker = "import os, time\ntime.sleep(0.3)\nprint(sorted(os.listdir('/dev/pts')))"
    a, b = box.run_many([opener, looker], concurrency=2)
    assert a.stdout == "['0', 'ptmx']\n" and b.stdout == "['ptmx']\n"
