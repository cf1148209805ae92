"""A call's processes, made ahead of its request (runs after `_program.py`, before `_zygote.py`).

Per call there is one Python process, the program, forked from the zygote into the call's PID
namespace, and the namespace's init, which is not a Python process at all: a `clone(CLONE_VM)`
of the zygote that runs libc's `pause()` on a stack of its own and never returns to user code.
It costs no page-table copy and no copy-on-write faults (it shares the zygote's memory, which is
non-dumpable, so nothing in the call can ptrace it or read its files under /proc/1), it has no
signal handler (so the kernel drops every signal a program sends it, SIGKILL and SIGSTOP
included), and the zygote SIGKILLs it when the call ends: the kernel then kills everything left
in the call's PID namespace. Orphans of the call are reparented to it; its SIGCHLD disposition
is a copy of the zygote's, SIG_IGN, so the kernel reaps them as they exit (no zombies counting
against the call's `nproc`).

The program, before its request arrives ("armed"): joins its memory group, makes fresh mount,
network, IPC and UTS namespaces, mounts a size-capped tmpfs on /work, /tmp and /dev/shm, a new
/proc and /dev/pts, hides the cgroup mount. With the request it sizes its tmpfs and memory
group, writes the files, then becomes the program (`_run_program`). The zygote is its parent,
waits for it, enforces the wall clock and reports the call.
"""

SPARE_DISK_BYTES = 64 << 20  # the armed tmpfs's size until a request resizes it
INIT_STACK = 16 << 10  # the pause()-init's own stack (it only enters the kernel)
CLONE_VM, CLONE_FILES = 0x00000100, 0x00000400
SYS_CLONE = {"x86_64": 56, "aarch64": 220, "riscv64": 220, "ppc64le": 120, "s390x": 120}.get(os.uname().machine, 56)
WALL = 0x40000000  # waitpid's __WALL: the program's exit signal is 0, not SIGCHLD
_PAUSE = ctypes.cast(libc.pause, ctypes.c_void_p)
pyapi = ctypes.PyDLL(None, use_errno=True)  # calls that keep the GIL, as os.fork does
libc.clone.restype = ctypes.c_int
libc.clone.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]


def _setup_namespaces(disk_bytes):
    """In the program-to-be: fresh mount, network (no counters or sockets of an earlier call),
    IPC and UTS namespaces, a private size-capped tmpfs and a new /proc."""
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS), "unshare")
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


def _fork_quietly():
    """fork() whose child has exit signal 0: the zygote ignores SIGCHLD (so the calls' inits and
    the orphans they inherit are reaped by the kernel) and still waits for its programs
    (`waitpid(pid, __WALL)`). A raw clone(2) wrapped in the interpreter's own before/after-fork
    hooks, as os.fork does; called with the GIL held (PyDLL)."""
    pyapi.PyOS_BeforeFork()
    pid = pyapi.syscall(SYS_CLONE, ctypes.c_ulong(0), None, None, None, None)
    if pid == 0:
        pyapi.PyOS_AfterFork_Child()
    else:
        pyapi.PyOS_AfterFork_Parent()
        if pid < 0:
            raise OSError(ctypes.get_errno(), "fork failed")
    return pid


class CallProcs:
    """A fresh PID namespace whose init is a pause()-clone, and one fork of the zygote inside it.

    `fork()` returns 0 in the child (PID 2 of the namespace) and the child's pid in the zygote,
    whose own children are born in its own PID namespace again afterwards. The zygote waits for
    the child (`wait`) before the init can finish exiting: init waits for every process of its
    namespace to be reaped. Init, a SIGCHLD child of a zygote that ignores SIGCHLD, is reaped by
    the kernel, and so are the orphans it inherits (its signal dispositions are a copy)."""

    def __init__(self, own_pidns):
        self.own_pidns, self.pid, self.pidfd, self.init_fd = own_pidns, None, None, None
        self.stack = ctypes.create_string_buffer(INIT_STACK)

    def fork(self):
        _check(libc.unshare(CLONE_NEWPID), "unshare pid")  # the next child is the namespace's PID 1
        pid = -1
        try:
            top = (ctypes.addressof(self.stack) + INIT_STACK) & ~15
            init = libc.clone(_PAUSE, top, CLONE_VM | CLONE_FILES | signal.SIGCHLD, None)
            if init < 0:
                raise OSError(ctypes.get_errno(), "clone of the call's init failed")
            self.init_fd = os.pidfd_open(init)
            pid = _fork_quietly()
            if pid:
                self.pid, self.pidfd = pid, os.pidfd_open(pid)
        except OSError:
            self.close()
            raise
        finally:
            if pid != 0:  # the zygote's next children are born in its own namespace again
                _check(libc.setns(self.own_pidns, CLONE_NEWPID), "setns back to the zygote's PID namespace")
        return pid

    def kill(self, program=True):
        """SIGKILL init (the kernel then kills the whole call) and, by default, the program."""
        for fd in (self.init_fd, self.pidfd if program else None):
            if fd is not None:
                try:
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
                except OSError:
                    pass

    def wait(self):
        """Reap the program: (wait status, rusage)."""
        _, status, usage = os.wait4(self.pid, WALL)
        os.close(self.pidfd)
        self.pid = self.pidfd = None
        return status, usage

    def release(self):
        """Once init is gone (its pidfd readable): close what is left."""
        if self.init_fd is not None:
            os.close(self.init_fd)
            self.init_fd = None
        self.stack = None

    def close(self):
        """Everything at once, blocking: the program (if any) first, then init."""
        self.kill()
        if self.pid:
            self.wait()
        if self.init_fd is not None:
            select.select([self.init_fd], [], [], 5.0)
        self.release()


def _read_request(msg, fds):
    """(request header, payload dict, stdout fd, stderr fd, stdin fd) from one control message."""
    head, _, inline = msg.partition(b"\n")
    req = json.loads(head)
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
        payload = json.loads(inline)
    stdin_fd = extra.pop(0) if req["stdin"] else os.open("/dev/null", os.O_RDONLY)
    return req, payload, out_fd, err_fd, stdin_fd


def _setup_failed(ready_w, what):
    os.write(ready_w, ("E" + what)[:1000].encode(errors="replace"))
    os._exit(1)


def _armed_program(sock, ready_w, config, group_dir):
    """The program's process before and after its request (see the module docstring)."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the zygote ignores it; the program's children are its own
    try:
        group = CallGroup(group_dir, config["cgroup_version"]) if group_dir else None
        workdir = _setup_namespaces(SPARE_DISK_BYTES)
        if group is not None:
            _mount("tmpfs", config["cgroup"], "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k")
    except OSError:
        os._exit(1)  # no request yet: the zygote sees a dead spare and makes another
    msg, fds, _, _ = socket.recv_fds(sock, 1 << 17, 8)
    if not msg:
        os._exit(0)
    armed_ns = time.process_time_ns()  # the sandbox's share of this process's CPU, not the call's
    sock.close()
    try:
        _, payload, out_fd, err_fd, stdin_fd = _read_request(msg, fds)
        limits = payload["limits"]
        _mount("none", "/work", None, MS_REMOUNT, f"size={limits['disk_bytes']}")
        if group is not None:
            group.set_limit(limits["memory_bytes"] + limits["disk_bytes"])
        _write_files(workdir, payload["files"])
    except (OSError, ValueError, KeyError) as exc:
        _setup_failed(ready_w, f"sandbox setup failed: {exc}")
    for target, fd in ((0, stdin_fd), (1, out_fd), (2, err_fd)):
        os.dup2(fd, target)
    _run_program(payload["code"], limits, workdir, True, ready_w, b"1%d" % armed_ns)


class Spare:
    """The next call's init and program, armed ahead of its request."""

    def __init__(self, config, groups, own_pidns):
        self.sock, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.group = groups.make()
        ready_r, ready_w = os.pipe()
        try:
            self.procs = CallProcs(own_pidns)
            pid = self.procs.fork()
        except OSError:
            for fd in (ready_r, ready_w):
                os.close(fd)
            child_end.close()
            self.sock.close()
            groups.drop(self.group)
            raise
        if pid == 0:
            try:
                self.sock.close()
                os.close(ready_r)
                os.close(config["ctrl_fd"])  # the host sees the worker's end at once if the zygote dies
                _armed_program(child_end, ready_w, config, self.group)
            finally:
                os._exit(1)
        child_end.close()
        os.close(ready_w)
        self.pid, self.pidfd, self.ready_r = pid, self.procs.pidfd, ready_r

    def dispatch(self, msg, fds):
        """Hand the request over; False when the spare died before it (then it is torn down)."""
        try:
            socket.send_fds(self.sock, [msg], fds)
            return True
        except OSError:
            self.discard()
            return False
        finally:
            self.sock.close()

    def discard(self):
        self.procs.close()
        os.close(self.ready_r)

    def started(self):
        """(whether the program's setup succeeded, the setup's failure reason or "", the CPU
        seconds its process spent armed, before the request: the sandbox's, not the call's)."""
        os.set_blocking(self.ready_r, False)
        try:
            got = os.read(self.ready_r, 1024)
        except BlockingIOError:
            got = b""
        os.close(self.ready_r)
        if got.startswith(b"1") and got[1:].isdigit():
            return True, "", int(got[1:]) / 1e9
        return False, got[1:].decode(errors="replace") if got.startswith(b"E") else "", 0.0


def _probe(own_pidns):
    """Whether per-call namespaces work here: "" if so, else why not. Run once at start."""
    r, w = os.pipe()
    procs = CallProcs(own_pidns)
    if procs.fork() == 0:
        try:
            _setup_namespaces(1 << 20)
            libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # as the program does: its own /proc files
            _check(libc.unshare(CLONE_NEWUSER), "unshare user")
            _write_id_maps(UID_IN_CALL, (0, 0))
            os.write(w, b"ok")
        except BaseException as exc:  # noqa: BLE001 - reported to the host
            os.write(w, str(exc).encode(errors="replace")[:500])
        finally:
            os._exit(0)
    os.close(w)
    answer = os.read(r, 512)
    os.close(r)
    procs.close()
    return "" if answer == b"ok" else answer.decode(errors="replace") or "the probe died"
