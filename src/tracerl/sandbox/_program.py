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
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2

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


# Per-call memory groups: cgroup knob names by version (limit, peak, events holding oom_kill).
GROUP_KNOBS = {1: ("memory.limit_in_bytes", "memory.max_usage_in_bytes", "memory.oom_control"),
               2: ("memory.max", "memory.peak", "memory.events")}


def _count(text, key):
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


class CallGroup:
    """In the call's program-to-be: its own memory group, joined before anything is allocated,
    with the limit knobs held open until its code runs (the program never sees the cgroup mount:
    it is hidden and the fds are closed)."""

    def __init__(self, path, version):
        fd = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)
        self.limit = os.open(os.path.join(path, GROUP_KNOBS[version][0]), os.O_WRONLY | os.O_CLOEXEC)
        swap = os.path.join(path, "memory.memsw.limit_in_bytes" if version == 1 else "memory.swap.max")
        self.swap = os.open(swap, os.O_WRONLY | os.O_CLOEXEC) if os.path.exists(swap) else None
        self.version = version

    def set_limit(self, nbytes):
        os.write(self.limit, str(nbytes).encode())
        if self.swap is not None:  # no swap beyond the limit (v1: memory+swap; v2: swap alone)
            os.write(self.swap, str(nbytes if self.version == 1 else 0).encode())


class CallGroups:
    """In the zygote: makes one memory group per call under the worker's group (mounted at
    `mount` by the host) and removes it once the call's init was reaped."""

    def __init__(self, mount, version=1):
        self.mount, self.version, self.stale = mount, version, []
        self.ids = iter(range(1 << 62))

    def make(self):
        if not self.mount:
            return None
        path = os.path.join(self.mount, f"call-{next(self.ids)}")
        os.mkdir(path)
        return path

    def report(self, path):
        """The call's memory peak and OOM kills so far, read by the zygote when its program ended."""
        if path is None:
            return {}
        _, peak, events = GROUP_KNOBS[self.version]
        if self.version == 2 and not os.path.exists(os.path.join(path, peak)):  # memory.peak is Linux >= 5.19
            peak = "memory.current"  # then the call's memory at its end, a lower bound of its peak
        try:
            with open(os.path.join(path, peak)) as f:
                top = int(f.read().strip() or 0)
            with open(os.path.join(path, events)) as f:
                return {"memory_peak_bytes": top, "oom_kills": _count(f.read(), "oom_kill")}
        except (OSError, ValueError):
            return {}

    def drop(self, path):
        """Remove the group (and any earlier one that was still busy)."""
        if path is None:
            return
        for old in self.stale + [path]:
            try:
                os.rmdir(old)
                if old in self.stale:
                    self.stale.remove(old)
            except FileNotFoundError:
                pass
            except OSError:
                if old not in self.stale:
                    self.stale.append(old)


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _FilterProg(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def _key_filter():
    """A seccomp program: add_key, request_key and keyctl fail with EPERM, so no call can hold
    keys or use up the key quota of the host uid that every call shares; other ABIs are killed."""
    machine = os.uname().machine
    arch = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}.get(machine)
    if arch is None:
        return None
    denied = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}[machine]
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    prog = [(ld_abs, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, 0x80000000), (ld_abs, 0, 0, 0)]
    checks = [(jge, 0x40000000)] if machine == "x86_64" else []  # the x32 ABI's numbers
    checks += [(jeq, nr) for nr in denied]
    for i, (op, k) in enumerate(checks):
        prog.append((op, len(checks) - i, 0, k))  # to the EPERM return after the ALLOW
    prog += [(ret, 0, 0, 0x7FFF0000), (ret, 0, 0, 0x00050000 | 1)]
    table = (_Filter * len(prog))(*[_Filter(*ins) for ins in prog])
    return table, _FilterProg(len(prog), table)


KEY_FILTER = _key_filter()  # built once in the zygote; installed per program


def _deny_keys():
    if KEY_FILTER is not None:
        _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(KEY_FILTER[1]), 0, 0), "seccomp")


def _run_program(code, limits, workdir, namespaces, ready_w, ready=b"1"):
    """Becomes the program: limits, privileges, stdio and a fresh __main__, then the code.

    `ready_w` gets `ready` ("1", then maybe the CPU nanoseconds the sandbox's own set-up took in
    this process) once the setup succeeded and is closed before the code runs, so a program
    cannot fake a setup failure (which would be reported as an infrastructure `crash`)."""
    try:
        _prepare_program(limits, workdir, namespaces, ready_w)
    except BaseException:  # noqa: BLE001 - report on stderr; init sees no ready byte
        import traceback
        os.write(2, ("tracerl sandbox setup failed:\n" + traceback.format_exc()).encode())
        os._exit(1)
    os.write(ready_w, ready)
    os.close(ready_w)
    _exec_program(code, workdir)


def _prepare_program(limits, workdir, namespaces, ready_w):
    import resource
    signal.signal(signal.SIGINT, signal.default_int_handler)  # what a fresh python has (init has none)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    os.setsid()
    os.closerange(3, ready_w)
    os.closerange(ready_w + 1, 1 << 16)
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # init is non-dumpable; the program is an ordinary process
    try:  # first in line for the OOM killer; where the host is root it cannot lower this again
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
                       "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8",
                       "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
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
        _deny_keys()
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
