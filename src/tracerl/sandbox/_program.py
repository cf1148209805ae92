"""Becoming the program, inside the sandbox: its own user namespace, limits, no privileges, a
fresh __main__, then the code. Standard library only; never imports tracerl.

This file and `_zygote.py` run as one module (see `worker.zygote_source`): this one first, with
the imports, constants and low-level helpers both use.
"""

import ctypes
import json
import os
import select
import signal
import socket
import sys
import time

MEMORY_EXIT = 250  # the program's wrapper exits with this on an uncaught MemoryError
UID_IN_CALL = 1000

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND = 1, 2, 4, 8, 4096
MNT_DETACH = 2
MS_REMOUNT = 32
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4

SYS_KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219, "ppc64le": 283, "s390x": 280}.get(os.uname().machine, 250)
KEYCTL_JOIN_SESSION_KEYRING = 1

libc = ctypes.CDLL(None, use_errno=True)


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source, target, fstype, flags, data=None):
    _check(libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None,
                      ctypes.c_ulong(flags), data.encode() if data else None), f"mount {target}")


def _write_id_maps(inner, outer):
    for name, text in (("setgroups", "deny"), ("uid_map", f"{inner} {outer[0]} 1"), ("gid_map", f"{inner} {outer[1]} 1")):
        fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_privileges():
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    last_cap = 63
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last_cap = int(f.read())
    except (OSError, ValueError):
        pass
    for cap in range(last_cap + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()
    _check(libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")


def _run_program(code, limits, workdir, namespaces, ready_w):
    """Becomes the program: limits, privileges, stdio and a fresh __main__, then the code.

    `ready_w` gets one byte once the setup succeeded and is closed before the code runs, so a
    program cannot fake a setup failure (which would be reported as an infrastructure `crash`)."""
    try:
        _prepare_program(limits, workdir, namespaces, ready_w)
    except BaseException:  # noqa: BLE001 - report on stderr; init sees no ready byte
        import traceback
        os.write(2, ("tracerl sandbox setup failed:\n" + traceback.format_exc()).encode())
        os._exit(1)
    os.write(ready_w, b"1")
    os.close(ready_w)
    _exec_program(code, workdir)


def _prepare_program(limits, workdir, namespaces, ready_w):
    import resource
    for sig in (signal.SIGCHLD, signal.SIGALRM, signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.setsid()
    os.closerange(3, ready_w)
    os.closerange(ready_w + 1, 1 << 16)
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # init is non-dumpable; the program is an ordinary process
    try:  # first in line for the OOM killer, before init, the zygote or anything of the host's
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY)
        os.write(fd, b"1000")
        os.close(fd)
    except OSError:
        pass
    if namespaces:  # a user namespace of its own: RLIMIT_NPROC then counts this call's processes only
        _check(libc.unshare(CLONE_NEWUSER), "unshare user")
        _write_id_maps(UID_IN_CALL, (0, 0))
        # No user namespaces below this one: inside one the program would hold capabilities again
        # (e.g. to mount a tmpfs that escapes the memory and disk limits).
        fd = os.open("/proc/sys/user/max_user_namespaces", os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)
    if namespaces:  # a fresh, empty session keyring: keys of earlier calls are out of reach
        libc.syscall(SYS_KEYCTL, KEYCTL_JOIN_SESSION_KEYRING, None)
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": "/tmp" if namespaces else workdir,
                       "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8"})
    cpu = max(1, int(-(-limits["cpu_s"] // 1)))
    for res, value in ((resource.RLIMIT_CPU, (cpu, cpu + 1)),
                       (resource.RLIMIT_AS, (limits["memory_bytes"],) * 2),
                       (resource.RLIMIT_NPROC, (limits["nproc"],) * 2),
                       (resource.RLIMIT_FSIZE, (limits["file_bytes"],) * 2),
                       (resource.RLIMIT_NOFILE, (limits["nofile"],) * 2),
                       (resource.RLIMIT_CORE, (0, 0))):
        resource.setrlimit(res, value)
    if namespaces:
        _drop_privileges()
    else:
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


def _exec_program(code, workdir):
    import atexit
    import builtins
    import io
    import linecache
    import traceback
    import types
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8",
                                  errors="backslashreplace", line_buffering=True)
    atexit._clear()  # exit handlers of the zygote's own modules are not the program's
    sys.argv = ["main.py"]
    sys.path[0:0] = [workdir]
    main = types.ModuleType("__main__")
    main.__dict__.update({"__builtins__": builtins, "__file__": os.path.join(workdir, "main.py")})
    sys.modules["__main__"] = main
    linecache.cache["<main>"] = (len(code), None, code.splitlines(True), "<main>")
    status = 0
    try:
        exec(compile(code, "<main>", "exec"), main.__dict__)
    except SystemExit as exc:
        status = _exit_code(exc.code)
    except MemoryError as exc:
        traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)
        status = MEMORY_EXIT
    except BaseException as exc:  # noqa: BLE001 - report like the interpreter would
        tb = exc.__traceback__.tb_next if exc.__traceback__ else None
        traceback.print_exception(type(exc), exc, tb)
        status = 1
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            pass
    os._exit(status)


def _exit_code(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except BaseException:  # noqa: BLE001
        pass
    return 1
