"""The warm worker that runs *inside* the sandbox. Standard library only; never imports tracerl.

It is started once (inside bubblewrap when available) with its control socket on the fd named in
its config. It makes itself root of a user namespace of its own (no host privilege: the host uid
stays unprivileged), imports the common modules, freezes them for the garbage collector, and then,
per call:

  zygote ──clone(new mount/PID/IPC/UTS namespaces)──► call init (PID 1 of the call)
            joins a memory cgroup of its own (where the host provides them), makes a fresh
            network namespace, mounts a fresh tmpfs on /work, /tmp and /dev/shm and a new /proc,
            hides the cgroup mount — all before the request arrives (the "armed" init; the next
            one is armed while a call runs) — then, with the request, sizes the tmpfs and the
            memory group to the call's limits, writes the files, and
            └─fork──► program: a user namespace of its own (so RLIMIT_NPROC counts this call's
                      processes only), rlimits, all capabilities dropped, no_new_privs, a seccomp
                      filter refusing the key syscalls, fds 3+ closed, clean environment, a fresh
                      __main__
          init reaps every process, enforces the wall clock (sigtimedwait on SIGCHLD), measures
          CPU and memory, sends the one result message and exits; the kernel then kills whatever
          is left in the PID namespace (daemons, double forks) and frees the tmpfs, the network
          namespace and, once the zygote reaps init, the memory group.

The zygote never runs candidate code, so every call starts from the same pristine state. The
zygote kills a call's init on the host's request (output limit) or when init's own wall clock
failed (backstop). Init is non-dumpable, so the program cannot ptrace it or read its fds, and the
program holds none of init's file descriptors. Init has no signal handler at all, so the kernel
drops every signal the program sends to PID 1 (it cannot end init or fake its deadline); the
call's status comes from init's result message, never from its pipes closing. A failure while
preparing the program is reported by init as `crash` (infrastructure), never as the program's
own outcome; an init the OOM killer took is reported as `memory`.
"""

# Runs as one module after _program.py (worker.zygote_source), whose imports, constants and
# helpers (libc, _check, _mount, _write_id_maps, _run_program, ...) it uses.

BACKSTOP_S = 2.0  # the zygote kills a call this long after its own wall clock should have
SPARE_DISK_BYTES = 64 << 20  # the armed tmpfs's size until a request resizes it
SYS_CLONE = {"x86_64": 56, "aarch64": 220, "riscv64": 220, "ppc64le": 120, "s390x": 120}.get(os.uname().machine, 56)
pyapi = ctypes.PyDLL(None, use_errno=True)  # calls that keep the GIL, as os.fork does


def _send(sock, message):
    sock.sendmsg([json.dumps(message).encode()])


def _own_signals():
    """Run once in the zygote, so every call's init inherits it. Init of a PID namespace gets
    only the signals it has a handler for from inside its namespace: so no signal keeps a
    handler (Python's SIGINT one made init raise KeyboardInterrupt), and SIGCHLD, the one it
    waits for, is blocked and collected with sigtimedwait. A program's signals to PID 1 are then
    dropped by the kernel: they cannot end init or fake its deadline."""
    for sig in signal.valid_signals():
        if sig not in (signal.SIGKILL, signal.SIGSTOP) and callable(signal.getsignal(sig)):
            signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})


def _setup_namespaces(disk_bytes):
    """In the call's init: a network namespace of its own (fresh: no counters or sockets of an
    earlier call), a private size-capped tmpfs and a new /proc."""
    _check(libc.unshare(CLONE_NEWNET), "unshare net")
    name = b"sandbox"
    libc.sethostname(name, len(name))
    opts = f"size={disk_bytes},nr_inodes=4096,mode=0755,uid=0,gid=0"
    _mount("tmpfs", "/sandbox", "tmpfs", MS_NOSUID | MS_NODEV, opts)
    for sub, target in (("work", "/work"), ("tmp", "/tmp"), ("shm", "/dev/shm")):
        os.mkdir(f"/sandbox/{sub}", 0o755 if sub == "work" else 0o1777)
        if os.path.isdir(target):
            _mount(f"/sandbox/{sub}", target, None, MS_BIND)
    _check(libc.umount2(b"/sandbox", MNT_DETACH), "umount /sandbox")
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    if os.path.isdir("/dev/pts"):  # ptys of its own: a shared devpts would let concurrent calls talk
        _mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
    for hidden in ("/proc/keys", "/proc/key-users"):  # key descriptions of earlier calls (same host uid)
        if os.path.exists(hidden):
            _mount("/dev/null", hidden, None, MS_BIND)
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


def _clone_into_namespaces():
    """fork() that also puts the child in new mount/PID/IPC/UTS namespaces, as PID 1.

    A raw clone(2) wrapped in the interpreter's own before/after-fork hooks (what os.fork does),
    so one process is both the call's monitor and its init. Called with the GIL held (PyDLL).
    """
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | signal.SIGCHLD
    pyapi.PyOS_BeforeFork()
    pid = pyapi.syscall(SYS_CLONE, ctypes.c_ulong(flags), None, None, None, None)
    if pid == 0:
        pyapi.PyOS_AfterFork_Child()
    else:
        pyapi.PyOS_AfterFork_Parent()
        if pid < 0:
            raise OSError(ctypes.get_errno(), "clone failed")
    return pid


def _armed(sock, ctrl, config, group_dir):
    """A call's init made before its request arrives: namespaces and mounts are ready, so the
    request only pays for the program. Exits if its setup fails (the zygote sees a dead spare).
    With per-call memory groups it joins its own, keeps its knobs open and hides the cgroup mount."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    group = CallGroup(group_dir, config["cgroup_version"]) if group_dir else None
    workdir = _setup_namespaces(SPARE_DISK_BYTES)
    if group is not None:
        _mount("tmpfs", config["cgroup"], "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k")
    msg, fds, _, _ = socket.recv_fds(sock, 1 << 17, 8)
    if not msg:
        os._exit(0)
    sock.close()
    head, _, inline = msg.partition(b"\n")
    req = json.loads(head)
    req["inline"] = inline
    _call(req, fds, ctrl, config, workdir, group)


def _call(req, fds, ctrl, config, workdir, group=None):
    """The call's monitor and init (PID 1 of its namespaces): files, the program, the report."""
    call_id, namespaces = req["id"], config["namespaces"]
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    out_fd, err_fd, *extra = fds
    if req["memfd"]:
        payload_fd = extra.pop(0)
        chunks = []
        while True:
            chunk = os.read(payload_fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(payload_fd)
        payload = json.loads(b"".join(chunks))
    else:
        payload = json.loads(req["inline"])
    stdin_fd = extra.pop(0) if req["stdin"] else os.open("/dev/null", os.O_RDONLY)
    limits, code = payload["limits"], payload["code"]
    try:
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        if namespaces:  # the tmpfs was mounted ahead of the request: give it this call's size
            _mount("none", "/work", None, MS_REMOUNT, f"size={limits['disk_bytes']}")
        else:
            workdir = _private_dir(config["workbase"])
        if group is not None:
            group.set_limit(limits["memory_bytes"] + limits["disk_bytes"])
        _write_files(workdir, payload["files"])
    except OSError as exc:
        _send(ctrl, {"id": call_id, "status": "crash", "reason": f"sandbox setup failed: {exc}"})
        os._exit(0)
    ready_r, ready_w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        for target, fd in ((0, stdin_fd), (1, out_fd), (2, err_fd)):
            os.dup2(fd, target)
        _run_program(code, limits, workdir, namespaces, ready_w)
    for fd in (stdin_fd, out_fd, err_fd, ready_w):
        os.close(fd)
    status, timed_out = _reap_until(pid, start + limits["wall_s"])
    if timed_out:
        _kill_tree(pid, namespaces)
        _, status = os.waitpid(pid, 0)
    os.set_blocking(ready_r, False)
    try:
        started = os.read(ready_r, 1) == b"1"
    except BlockingIOError:
        started = False
    if not started and not timed_out:
        _send(ctrl, {"id": call_id, "status": "crash", "reason": "the program's sandbox setup failed (see stderr)"})
        os._exit(0)
    import resource
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if not namespaces:  # with namespaces, this process exiting takes every other one with it
        _kill_tree(pid, namespaces)
        import shutil
        shutil.rmtree(workdir, ignore_errors=True)
    report = {"id": call_id, "wait_status": status, "timed_out": timed_out,
              "wall_s": time.monotonic() - start, "cpu_s": usage.ru_utime + usage.ru_stime,
              "max_rss_bytes": usage.ru_maxrss * 1024}
    if group is not None:
        report.update(group.report())
    _send(ctrl, report)
    os._exit(0)


def _reap_until(pid, deadline):
    """Reap every child (orphans included) until `pid` exits or the deadline passes; returns
    (wait status or None, timed out). Only a real SIGCHLD or the clock moves it on."""
    while True:
        while True:
            try:
                reaped, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                reaped = 0
            if reaped == 0:
                break
            if reaped == pid:
                return st, False
        left = deadline - time.monotonic()
        if left <= 0:
            return None, True
        signal.sigtimedwait([signal.SIGCHLD], left)


def _kill_tree(pid, namespaces):
    try:
        os.kill(pid, signal.SIGKILL)
        if not namespaces:
            os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _spawn(req, fds, ctrl, config):
    """Without namespaces: start one call in a child; returns its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            _call(req, fds, ctrl, config, None)
        finally:
            os._exit(1)
    return pid


class Spare:
    """The next call's init, armed ahead (see `_armed`)."""

    def __init__(self, ctrl, config, groups):
        self.sock, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.group = groups.make()
        try:
            self.pid = _clone_into_namespaces()
        except OSError:
            groups.drop(self.group)
            raise
        if self.pid == 0:
            try:
                self.sock.close()
                _armed(child_end, ctrl, config, self.group)
            finally:
                os._exit(1)
        child_end.close()

    def dispatch(self, msg, fds):
        """Hand the request over; False when the spare died before it (then it is reaped)."""
        try:
            socket.send_fds(self.sock, [msg], fds)
            return True
        except OSError:
            os.waitpid(self.pid, 0)
            return False
        finally:
            self.sock.close()


def _enter_own_user_namespace():
    """The zygote becomes root (no host privilege) of a user namespace of its own, so it owns the
    namespaces it creates per call: the host uid it runs as stays unprivileged."""
    ids = (os.getuid(), os.getgid())
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNET), "unshare user")
    _write_id_maps(0, ids)


def _probe():
    """Whether per-call namespaces work here; run once at start, reported to the host."""
    r, w = os.pipe()
    pid = _clone_into_namespaces()
    if pid == 0:
        try:
            _setup_namespaces(1 << 20)
            if os.fork() == 0:
                _check(libc.unshare(CLONE_NEWUSER), "unshare user")
                _write_id_maps(UID_IN_CALL, (0, 0))
                os.write(w, b"ok")
                os._exit(0)
            os.wait()
        finally:
            os._exit(0)
    os.close(w)
    answer = os.read(r, 2)
    os.close(r)
    os.waitpid(pid, 0)
    return answer == b"ok"


def main():
    config = json.loads(sys.argv[1])
    for fd in range(3, 1 << 10):  # the bootstrap's source memfd and anything else but the socket
        if fd != config["ctrl_fd"]:
            try:
                os.close(fd)
            except OSError:
                pass
    ctrl = socket.socket(fileno=config["ctrl_fd"])
    _own_signals()
    for name in config.get("preload", []):
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - a missing optional module only costs warmth
            pass
    groups = CallGroups(config.get("cgroup"), config.get("cgroup_version", 1))
    import gc
    if config["preload"]:
        gc.collect()
        gc.freeze()  # children never scan (and so never copy-on-write) the zygote's objects
    if config["namespaces"]:
        try:
            _enter_own_user_namespace()
            ready = _probe() if config["probe"] else True
        except OSError as exc:
            ready = False
            _send(ctrl, {"ready": False, "reason": f"per-call namespaces unavailable inside the sandbox: {exc}"})
            return
        if not ready:
            _send(ctrl, {"ready": False, "reason": "per-call namespaces could not be created inside the sandbox"})
            return
    _send(ctrl, {"ready": True, "pid": os.getpid(), "python": sys.version.split()[0]})
    poller = select.poll()
    poller.register(ctrl.fileno(), select.POLLIN)
    calls = {}  # pidfd -> (pid, call id, deadline, memory group dir)
    by_id = {}  # call id -> pid
    killed = {}  # call id -> result to send when its init is reaped
    spare = Spare(ctrl, config, groups) if config["namespaces"] and config["preload"] else None
    while True:
        now = time.monotonic()
        timeout = min((c[2] for c in calls.values()), default=now + 3600) - now
        for fd, _ in poller.poll(max(0.0, timeout) * 1000):
            if fd == ctrl.fileno():
                msg, fds, _, _ = socket.recv_fds(ctrl, 1 << 17, 8)
                if not msg:
                    return
                head, _, inline = msg.partition(b"\n")
                req = json.loads(head)
                req["inline"] = inline
                if "kill" in req:
                    pid = by_id.get(req["kill"])
                    if pid is not None:
                        killed[req["kill"]] = {"status": "killed", "reason": "killed on the host's request"}
                        os.kill(pid, signal.SIGKILL)
                    continue
                pid, group = None, None
                try:
                    if not config["namespaces"]:
                        pid = _spawn(req, fds, ctrl, config)
                    else:
                        for _ in range(2):  # a spare that died while armed is replaced once
                            spare = spare or Spare(ctrl, config, groups)
                            if spare.dispatch(msg, fds):
                                pid, group = spare.pid, spare.group
                                spare = None
                                break
                            groups.drop(spare.group)
                            spare = None
                        if pid is None:
                            raise OSError("the call's init could not be prepared")
                except OSError as exc:
                    _send(ctrl, {"id": req["id"], "status": "crash", "reason": f"could not start the call: {exc}"})
                for f in fds:
                    os.close(f)
                if pid is None:
                    continue
                pidfd = os.pidfd_open(pid)
                calls[pidfd] = (pid, req["id"], time.monotonic() + req["wall_s"] + BACKSTOP_S, group)
                by_id[req["id"]] = pid
                poller.register(pidfd, select.POLLIN)
                if config["namespaces"]:
                    try:  # arm the next call's init while this one runs
                        spare = Spare(ctrl, config, groups)
                    except OSError:
                        spare = None
            else:
                pid, call_id, _, group = calls.pop(fd)
                poller.unregister(fd)
                os.close(fd)
                by_id.pop(call_id, None)
                _, status = os.waitpid(pid, 0)  # init reaped: every process of the call is gone
                oom_kills = groups.drop(group)
                if call_id in killed:
                    _send(ctrl, {"id": call_id, **killed.pop(call_id)})
                elif status != 0 and oom_kills:  # init itself was the OOM killer's pick
                    _send(ctrl, {"id": call_id, "status": "memory", "oom_kills": oom_kills,
                                 "reason": "OOM-killed at the call's memory cap"})
                elif status != 0:
                    _send(ctrl, {"id": call_id, "status": "crash",
                                 "reason": f"the call's monitor died (wait status {status})"})
        now = time.monotonic()
        for pid, call_id, deadline, _ in list(calls.values()):
            if now >= deadline and call_id not in killed:  # its own wall clock failed: backstop
                killed[call_id] = {"status": "crash", "reason": "the call's init missed its wall clock; killed by the zygote"}
                os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
