"""The warm worker that runs *inside* the sandbox. Standard library only; never imports tracerl.

It is started once (inside bubblewrap when available) with its control socket on fd 3, imports
the common modules, and then forks per call:

  zygote ──fork──► monitor (per call: new user/mount/PID/IPC/UTS/net namespaces, a fresh tmpfs
                     │        mounted on /work and /tmp; kills the call past its deadline;
                     │        sends the one result message)
                     └─fork──► init (PID 1 of the call's namespace: mounts /proc, reaps every
                                 │     process, enforces the wall clock, measures CPU and memory;
                                 │     when it exits the kernel kills whatever is left)
                                 └─fork──► program (rlimits, all capabilities dropped,
                                            no_new_privs, fds 3+ closed, clean environment)

The zygote never runs candidate code, so every call starts from the same pristine state.
Monitor and init are non-dumpable, so the program cannot ptrace them, and the program holds none
of their file descriptors. The only signal init listens to is SIGALRM (its wall clock): a program
that sends it to PID 1 only ends its own call as a timeout.
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
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4

libc = ctypes.CDLL(None, use_errno=True)


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source, target, fstype, flags, data=None):
    _check(libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None,
                      ctypes.c_ulong(flags), data.encode() if data else None), f"mount {target}")


def _send(sock, message):
    sock.sendmsg([json.dumps(message).encode()])


class _Deadline(Exception):
    pass


def _enter_namespaces(limits):
    """In the monitor: new namespaces, then a private size-capped tmpfs for /work and /tmp."""
    uid, gid = os.getuid(), os.getgid()
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
                        | CLONE_NEWNET), "unshare")
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{UID_IN_CALL} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{UID_IN_CALL} {gid} 1")
    name = b"sandbox"
    libc.sethostname(name, len(name))
    opts = f"size={limits['disk_bytes']},nr_inodes=4096,mode=0755,uid={UID_IN_CALL},gid={UID_IN_CALL}"
    _mount("tmpfs", "/sandbox", "tmpfs", MS_NOSUID | MS_NODEV, opts)
    for sub, target in (("work", "/work"), ("tmp", "/tmp"), ("shm", "/dev/shm")):
        os.mkdir(f"/sandbox/{sub}", 0o755 if sub == "work" else 0o1777)
        if os.path.isdir(target):
            _mount(f"/sandbox/{sub}", target, None, MS_BIND)
    _check(libc.umount2(b"/sandbox", MNT_DETACH), "umount /sandbox")
    return "/work"


def _private_dir(base):
    """Without namespaces: a fresh directory under the host-provided base, removed afterwards."""
    import tempfile
    return tempfile.mkdtemp(prefix="call-", dir=base)


def _write_files(workdir, files):
    import base64
    for rel, (kind, data) in files.items():
        path = os.path.join(workdir, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data) if kind == "b64" else data.encode())


def _drop_privileges():
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                    ("inheritable", ctypes.c_uint32)]

    header, data = Header(0x20080522, 0), (Data * 2)()
    _check(libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")


def _run_program(code, limits, workdir, namespaces):
    """Becomes the program: limits, privileges, stdio and a fresh __main__, then the code."""
    import resource
    for sig in (signal.SIGCHLD, signal.SIGALRM, signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.setsid()
    os.closerange(3, 1 << 16)
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
    import builtins
    import io
    import linecache
    import traceback
    import types
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8",
                                  errors="backslashreplace", line_buffering=True)
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
        import atexit
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


def _init(code, limits, workdir, namespaces, report_w):
    """PID 1 of the call (or a session leader without namespaces): fork the program, reap, time."""
    if namespaces:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _run_program(code, limits, workdir, namespaces)
    for fd in (0, 1, 2):
        os.close(fd)

    def on_alarm(signum, frame):
        raise _Deadline()

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limits["wall_s"])
    timed_out, status = False, None
    try:
        while status is None:
            reaped, st = os.waitpid(-1, 0)
            if reaped == pid:
                status = st
    except _Deadline:
        timed_out = True
        os.kill(pid, signal.SIGKILL)
        if not namespaces:
            os.killpg(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    signal.setitimer(signal.ITIMER_REAL, 0)
    import resource
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if not namespaces:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    report = {"wait_status": status, "timed_out": timed_out, "wall_s": time.monotonic() - start,
              "cpu_s": usage.ru_utime + usage.ru_stime, "max_rss_bytes": usage.ru_maxrss * 1024}
    os.write(report_w, json.dumps(report).encode())
    os._exit(0)


def _monitor(req, fds, ctrl, config):
    """One call, from namespaces to result message. Runs in a child of the zygote."""
    call_id = req["id"]
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    payload_fd, stdin_fd, out_fd, err_fd = fds
    chunks = []
    while True:
        chunk = os.read(payload_fd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(payload_fd)
    payload = json.loads(b"".join(chunks))
    limits, namespaces = payload["limits"], config["namespaces"]
    result = {"id": call_id}
    try:
        workdir = _enter_namespaces(limits) if namespaces else _private_dir(config["workbase"])
        _write_files(workdir, payload["files"])
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # after the uid maps: /proc/self turns root-owned
    except OSError as exc:
        result.update(status="crash", reason=f"sandbox setup failed: {exc}")
        _send(ctrl, result)
        os._exit(0)
    report_r, report_w = os.pipe()
    child = os.fork()
    if child == 0:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        ctrl.close()
        os.close(report_r)
        for target, fd in ((0, stdin_fd), (1, out_fd), (2, err_fd)):
            os.dup2(fd, target)
        for fd in (stdin_fd, out_fd, err_fd):
            os.close(fd)
        try:
            _init(payload["code"], limits, workdir, namespaces, report_w)
        finally:
            os._exit(3)
    for fd in (stdin_fd, out_fd, err_fd, report_w):
        os.close(fd)
    killed = []

    def on_kill(signum, frame):
        killed.append(True)
        os.kill(child, signal.SIGKILL)
        if not namespaces:
            try:
                os.killpg(child, signal.SIGKILL)
            except OSError:
                pass

    signal.signal(signal.SIGUSR1, on_kill)
    pidfd = os.pidfd_open(child)
    deadline = time.monotonic() + limits["wall_s"] + 2.0
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    while not poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
        if time.monotonic() >= deadline:
            os.kill(child, signal.SIGKILL)
            break
    os.waitpid(child, 0)
    raw = b""
    while True:
        chunk = os.read(report_r, 65536)
        if not chunk:
            break
        raw += chunk
    if not namespaces:
        import shutil
        shutil.rmtree(workdir, ignore_errors=True)
    if killed:
        result.update(status="killed", reason="killed on the host's request")
    elif raw:
        result.update(json.loads(raw))
    else:
        result.update(status="timeout", reason="the call's init did not answer by its deadline; killed")
    _send(ctrl, result)
    os._exit(0)


def _probe():
    """Whether per-call namespaces work here; run once at start, reported to the host."""
    pid = os.fork()
    if pid == 0:
        try:
            _enter_namespaces({"disk_bytes": 1 << 20})
            os._exit(0)
        except BaseException:  # noqa: BLE001
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return status == 0


def main():
    config = json.loads(sys.argv[1])
    ctrl = socket.socket(fileno=config["ctrl_fd"])
    for name in config.get("preload", []):
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - a missing optional module only costs warmth
            pass
    namespaces = config["namespaces"]
    if namespaces and not _probe():
        _send(ctrl, {"ready": False, "reason": "per-call namespaces could not be created inside the sandbox"})
        return
    _send(ctrl, {"ready": True, "pid": os.getpid(), "python": sys.version.split()[0]})
    poller = select.poll()
    poller.register(ctrl.fileno(), select.POLLIN)
    monitors = {}  # pidfd -> (pid, call id)
    by_id = {}
    while True:
        for fd, _ in poller.poll():
            if fd == ctrl.fileno():
                msg, fds, _, _ = socket.recv_fds(ctrl, 1 << 16, 8)
                if not msg:
                    return
                req = json.loads(msg)
                if "kill" in req:
                    pid = by_id.get(req["kill"])
                    if pid is not None:
                        os.kill(pid, signal.SIGUSR1)
                    continue
                pid = os.fork()
                if pid == 0:
                    try:
                        _monitor(req, fds, ctrl, config)
                    finally:
                        os._exit(1)
                for f in fds:
                    os.close(f)
                pidfd = os.pidfd_open(pid)
                monitors[pidfd] = (pid, req["id"])
                by_id[req["id"]] = pid
                poller.register(pidfd, select.POLLIN)
            else:
                pid, call_id = monitors.pop(fd)
                poller.unregister(fd)
                os.close(fd)
                by_id.pop(call_id, None)
                _, status = os.waitpid(pid, 0)
                if status != 0:
                    _send(ctrl, {"id": call_id, "status": "crash",
                                 "reason": f"the call's monitor died (wait status {status})"})


if __name__ == "__main__":
    main()
