"""The warm worker that runs *inside* the sandbox. Standard library only; never imports tracerl.

It is started once (inside bubblewrap when available) with its control socket on the fd named in
its config. It makes itself root of a user namespace of its own (no host privilege: the host uid
stays unprivileged) and PID 1 of a PID namespace of its own, imports the common modules, freezes
them for the garbage collector, becomes non-dumpable, and then, per call (`_spare.py`):

  zygote ──clone(CLONE_VM, new PID namespace)──► the call's init: libc pause(), no Python, no
     │                                          signal handler; SIGKILLed when the call ends
     └──setns + fork──► the program (PID 2 of the call): its own memory cgroup, fresh mount,
                        network, IPC and UTS namespaces, fresh tmpfs on /work, /tmp and /dev/shm,
                        a new /proc — all before the request arrives (the "armed" spare; the next
                        one is armed while a call runs) — then, with the request, the tmpfs and
                        memory group sized to the call's limits, the files, and
                        `_run_program`: a user namespace of its own (RLIMIT_NPROC counts this
                        call's processes only), rlimits, all capabilities dropped, no_new_privs,
                        a seccomp filter refusing the key syscalls, fds 3+ closed, a clean
                        environment, a fresh __main__

The zygote is the program's parent: it enforces the wall clock, waits for the program, measures
CPU and memory, sends the one result message, then SIGKILLs the call's init, so the kernel kills
whatever is left in the call's PID namespace (daemons, double forks) and frees the tmpfs and the
network namespace; once init is reaped the memory group is removed. The zygote never runs
candidate code, so every call starts from the same pristine state. Nothing in a call can signal
or ptrace the zygote (it is outside the call's PID namespace) or its init (no handlers: the kernel
drops the program's signals to PID 1; non-dumpable memory: no ptrace, no /proc/1/fd). A call's
status comes from the zygote's result message, never from its pipes closing. A failure while
preparing the program is reported as `crash` (infrastructure), never as the program's own
outcome: the program writes one "ready" byte on a pipe it closes before its code runs.

Without namespaces (level "rlimits") a forked monitor per call (`_call`) does the same job.
"""

# Runs as one module after _program.py and _spare.py (worker.zygote_source), whose imports,
# constants and helpers (libc, _check, _mount, _write_id_maps, _run_program, Spare, ...) it uses.

BACKSTOP_S = 2.0  # without namespaces: the zygote kills a call this long after its monitor should have


def _send(sock, message):
    sock.sendmsg([json.dumps(message).encode()])


def _own_signals():
    """Run once in the zygote, so every call's init (a clone holding a copy of its dispositions)
    inherits it. Init of a PID namespace gets only the signals it has a handler for from inside
    its namespace: so no signal keeps a handler (Python's SIGINT one once made an init raise
    KeyboardInterrupt), and a program's signals to PID 1 are dropped by the kernel. SIGCHLD is
    blocked: the zygote waits on pidfds (and, without namespaces, a call's monitor collects it
    with sigtimedwait)."""
    for sig in signal.valid_signals():
        if sig not in (signal.SIGKILL, signal.SIGSTOP) and callable(signal.getsignal(sig)):
            signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})


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


def _call(msg, fds, ctrl, config):
    """Without namespaces: the call's monitor (a fork of the zygote): files, the program, the report."""
    req, payload, out_fd, err_fd, stdin_fd = _read_request(msg, fds)
    call_id = req["id"]
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    limits, code = payload["limits"], payload["code"]
    try:
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        workdir = _private_dir(config["workbase"])
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
        _run_program(code, limits, workdir, False, ready_w)
    for fd in (stdin_fd, out_fd, err_fd, ready_w):
        os.close(fd)
    status, timed_out = _reap_until(pid, start + limits["wall_s"])
    if timed_out:
        _kill_tree(pid, False)
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
    _kill_tree(pid, False)
    import shutil
    shutil.rmtree(workdir, ignore_errors=True)
    _send(ctrl, {"id": call_id, "wait_status": status, "timed_out": timed_out,
                 "wall_s": time.monotonic() - start, "cpu_s": usage.ru_utime + usage.ru_stime,
                 "max_rss_bytes": usage.ru_maxrss * 1024})
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


def _spawn(msg, fds, ctrl, config):
    """Without namespaces: start one call in a child; returns its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            _call(msg, fds, ctrl, config)
        finally:
            os._exit(1)
    return pid


def _enter_own_namespaces():
    """The zygote becomes root (no host privilege) of a user namespace of its own, so it owns the
    namespaces it creates per call (the host uid it runs as stays unprivileged), and PID 1 of a
    PID namespace owned by it, so it may move back from a call's PID namespace after forking a
    program into it. The process that made the namespaces waits and exits with the zygote."""
    ids = (os.getuid(), os.getgid())
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID), "unshare user")
    _write_id_maps(0, ids)
    pid = os.fork()
    if pid:
        os.closerange(3, 1 << 16)
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)  # before it is non-dumpable
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # no call's process can ptrace it (or a call's init)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # inits and their orphans: reaped by the kernel
    return own_pidns


class _Calls:
    """The zygote's book of calls in flight (namespaces): programs running, inits to reap."""

    def __init__(self, ctrl, groups, poller):
        self.ctrl, self.groups, self.poller = ctrl, groups, poller
        self.running = {}  # program pidfd -> Spare
        self.ending = {}  # init pidfd -> Spare
        self.by_id = {}

    def start(self, spare, req):
        spare.id, spare.start = req["id"], time.monotonic()
        spare.deadline, spare.timed_out, spare.killed = spare.start + req["wall_s"], False, None
        self.running[spare.pidfd] = spare
        self.by_id[spare.id] = spare
        self.poller.register(spare.pidfd, select.POLLIN)

    def kill(self, call_id, why=None):
        spare = self.by_id.get(call_id)
        if spare is not None:
            if why is not None:
                spare.killed = why
            spare.procs.kill()

    def next_deadline(self):
        return min((s.deadline for s in self.running.values() if not s.timed_out), default=None)

    def expire(self, now):
        for spare in list(self.running.values()):
            if now >= spare.deadline and not spare.timed_out:
                spare.timed_out = True
                self.kill(spare.id)

    def event(self, fd):
        if fd in self.running:
            self._ended(self.running.pop(fd))
        elif fd in self.ending:
            spare = self.ending.pop(fd)
            self.poller.unregister(fd)
            spare.procs.release()  # init is gone, and with it every process of the call
            self.groups.drop(spare.group)

    def _ended(self, spare):
        self.poller.unregister(spare.pidfd)
        self.by_id.pop(spare.id, None)
        status, usage = spare.procs.wait()
        wall = time.monotonic() - spare.start
        memory = self.groups.report(spare.group)
        spare.procs.kill(program=False)  # the kernel kills what is left of the call
        self.ending[spare.procs.init_fd] = spare
        self.poller.register(spare.procs.init_fd, select.POLLIN)
        started, why, armed_s = spare.started()
        if spare.killed is not None:
            report = spare.killed
        elif not started and not spare.timed_out:
            if memory.get("oom_kills"):
                report = {"status": "memory", "reason": "OOM-killed at the call's memory cap", **memory}
            else:
                report = {"status": "crash", "reason": why or "the program's sandbox setup failed (see stderr)"}
        else:
            report = {"wait_status": status, "timed_out": spare.timed_out, "wall_s": wall,
                      "cpu_s": max(0.0, usage.ru_utime + usage.ru_stime - armed_s), "max_rss_bytes": usage.ru_maxrss * 1024, **memory}
        _send(self.ctrl, {"id": spare.id, **report})


def _dispatch(spare, msg, fds, config, groups, own_pidns):
    """Hand a request to the armed spare (one dead while armed is replaced once); returns the
    spare that took it, or raises OSError."""
    for _ in range(2):
        spare = spare or Spare(config, groups, own_pidns)
        if spare.dispatch(msg, fds):
            return spare
        groups.drop(spare.group)
        spare = None
    raise OSError("the call's init could not be prepared")


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
    own_pidns = None
    if config["namespaces"]:
        try:
            own_pidns = _enter_own_namespaces()
            why = _probe(own_pidns) if config["probe"] else ""
        except OSError as exc:
            why = str(exc)
        if why:
            _send(ctrl, {"ready": False, "reason": f"per-call namespaces could not be created inside the sandbox: {why}"})
            return
    if config["preload"]:
        gc.collect()
        gc.freeze()  # children never scan (and so never copy-on-write) the zygote's objects
    _send(ctrl, {"ready": True, "pid": os.getpid(), "python": sys.version.split()[0]})
    poller = select.poll()
    poller.register(ctrl.fileno(), select.POLLIN)
    book = _Calls(ctrl, groups, poller)
    monitors = {}  # without namespaces: monitor pidfd -> (pid, call id, deadline)
    killed = {}  # without namespaces: call id -> result to send when its monitor is reaped
    spare = Spare(config, groups, own_pidns) if config["namespaces"] and config["preload"] else None
    while True:
        now = time.monotonic()
        deadlines = [d for d in (book.next_deadline(), *(m[2] for m in monitors.values())) if d is not None]
        timeout = min(deadlines, default=now + 3600) - now
        for fd, _ in poller.poll(max(0.0, timeout) * 1000):
            if fd != ctrl.fileno():
                if fd in monitors:
                    _monitor_ended(fd, monitors, killed, ctrl, poller)
                else:
                    book.event(fd)
                continue
            msg, fds, _, _ = socket.recv_fds(ctrl, 1 << 17, 8)
            if not msg:
                return
            req = json.loads(msg.partition(b"\n")[0])
            if "kill" in req:
                why = {"status": "killed", "reason": "killed on the host's request"}
                book.kill(req["kill"], why)
                pid = next((m[0] for m in monitors.values() if m[1] == req["kill"]), None)
                if pid is not None:
                    killed[req["kill"]] = why
                    os.kill(pid, signal.SIGKILL)
                continue
            try:
                if config["namespaces"]:
                    book.start(_dispatch(spare, msg, fds, config, groups, own_pidns), req)
                    spare = None
                else:
                    pid = _spawn(msg, fds, ctrl, config)
                    pidfd = os.pidfd_open(pid)
                    monitors[pidfd] = (pid, req["id"], time.monotonic() + req["wall_s"] + BACKSTOP_S)
                    poller.register(pidfd, select.POLLIN)
            except OSError as exc:
                spare = None
                _send(ctrl, {"id": req["id"], "status": "crash", "reason": f"could not start the call: {exc}"})
            for f in fds:
                os.close(f)
            if config["namespaces"] and spare is None:
                try:  # arm the next call while this one runs
                    spare = Spare(config, groups, own_pidns)
                except OSError:
                    spare = None
        now = time.monotonic()
        book.expire(now)
        for pid, call_id, deadline in list(monitors.values()):
            if now >= deadline and call_id not in killed:  # its monitor missed its wall clock: backstop
                killed[call_id] = {"status": "crash", "reason": "the call's monitor missed its wall clock; killed by the zygote"}
                os.kill(pid, signal.SIGKILL)


def _monitor_ended(fd, monitors, killed, ctrl, poller):
    pid, call_id, _ = monitors.pop(fd)
    poller.unregister(fd)
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    if call_id in killed:
        _send(ctrl, {"id": call_id, **killed.pop(call_id)})
    elif status != 0:
        _send(ctrl, {"id": call_id, "status": "crash", "reason": f"the call's monitor died (wait status {status})"})


if __name__ == "__main__":
    main()
