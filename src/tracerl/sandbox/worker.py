"""The host's handle on one warm worker (`_zygote.py`): start it, send calls, route results.

Calls travel as a small JSON header plus file descriptors (SCM_RIGHTS) over a SOCK_SEQPACKET
pair: a memfd with the code/files/limits, a memfd as stdin (so reading stdin never blocks), and
the write ends of two pipes the host reads stdout and stderr from. Results come back as one
message per call, written by the call's monitor. Many calls may be in flight at once.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import tempfile
import threading
from importlib import resources

from tracerl.sandbox import cgroups
from tracerl.sandbox.backend import PRELOAD, THREAD_ENV, Plan

_ZYGOTE_SOURCE: str | None = None


def zygote_source() -> str:
    """The worker's code: `_program.py`, `_spare.py`, then `_zygote.py`, run as one module inside the sandbox."""
    global _ZYGOTE_SOURCE
    if _ZYGOTE_SOURCE is None:
        files = resources.files("tracerl.sandbox")
        _ZYGOTE_SOURCE = "\n\n".join(files.joinpath(name).read_text() for name in ("_program.py", "_spare.py", "_zygote.py"))
    return _ZYGOTE_SOURCE


MAX_PIDS = 4096  # processes of all of one worker's calls together, where cgroups allow a cap
INLINE_PAYLOAD = 48 * 1024  # payloads up to this size ride in the control message itself
CALL_GROUPS_MOUNT = "/sandbox-cgroup"  # where the worker sees its memory group; hidden from programs


class WorkerDied(RuntimeError):
    """The warm worker is gone; calls in flight end as `crash` and the next call starts a new one."""


class _Pending:
    __slots__ = ("event", "result")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.result: dict | None = None


class Worker:
    """One zygote process. Thread-safe: any number of threads may `submit` at once."""

    def __init__(self, plan: Plan, start_timeout_s: float = 30.0, warm: bool = True,
                 total_memory_bytes: int | None = None, preload: tuple[str, ...] = ()) -> None:
        """`warm=False` is for a single call: no preloaded modules and no start-up probe.
        `total_memory_bytes` caps everything the worker's calls hold, where cgroups allow it."""
        self.plan = plan
        host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock = host
        source_fd = _memfd("tracerl-zygote", zygote_source().encode())
        config = {"ctrl_fd": child.fileno(), "namespaces": plan.level == "full",
                  "workbase": plan.workbase, "preload": [*PRELOAD, *preload] if warm else [], "probe": warm,
                  "cgroup": None, "cgroup_version": 1}
        bootstrap = (f"import os; exec(compile(os.pread({source_fd}, 1 << 20, 0), 'tracerl-sandbox-worker', 'exec'))")
        argv = list(plan.argv)
        self.group = None
        if total_memory_bytes and plan.level == "full" and plan.run_as is not None and cgroups.available()[0]:
            try:
                self.group = cgroups.WorkerGroup(total_memory_bytes, MAX_PIDS, owner=plan.run_as)
            except OSError:
                self.group = None
        if self.group is not None:  # the worker makes one memory group per call below its own
            config["cgroup"], config["cgroup_version"] = CALL_GROUPS_MOUNT, self.group.version
            at = argv.index("--remount-ro")
            argv[at:at] = ["--bind", self.group.memory_dir, CALL_GROUPS_MOUNT]
        argv += [bootstrap, json.dumps(config)]
        if plan.run_as is not None:  # as root: OOM score floor, join the groups, drop to the sandbox user
            files = ":".join(self.group.procs_files) if self.group is not None else ""
            argv = [plan.python, "-I", "-S", "-c", cgroups.JOIN_AND_DROP, str(plan.run_as), files, *argv]
        kwargs = {}
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", **{k: "1" for k in THREAD_ENV}}
        self._log = tempfile.TemporaryFile(prefix="tracerl-sandbox-worker-")
        try:
            self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=self._log, pass_fds=(child.fileno(), source_fd),
                                          cwd="/", env=env, start_new_session=True, **kwargs)
        except OSError as exc:
            self._sock.close()
            self._log.close()
            if self.group is not None:
                self.group.remove()
            raise WorkerDied(f"the sandbox worker could not be started: {exc}") from exc
        finally:
            child.close()
            os.close(source_fd)
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self.alive = True
        self._sock.settimeout(start_timeout_s)
        try:
            hello = self._sock.recv(1 << 16)
        except (socket.timeout, OSError):
            hello = b""
        self._sock.settimeout(None)
        info = json.loads(hello) if hello else {}
        if not info.get("ready"):
            self.close()
            detail = info.get("reason") or self._stderr_tail() or "it exited without a word"
            raise WorkerDied(f"the sandbox worker did not start: {detail}")
        self.info = info
        self.pid = self._proc.pid
        self._reader = threading.Thread(target=self._read_results, name="tracerl-sandbox-reader", daemon=True)
        self._reader.start()

    def _stderr_tail(self) -> str:
        try:
            self._proc.wait(timeout=2)
            self._log.seek(0)
            return self._log.read().decode(errors="replace").strip()[-500:]
        except (subprocess.TimeoutExpired, OSError, ValueError):
            return ""

    def _read_results(self) -> None:
        while True:
            try:
                msg = self._sock.recv(1 << 16)
            except OSError:
                msg = b""
            if not msg:
                break
            result = json.loads(msg)
            with self._lock:
                pending = self._pending.pop(result.get("id"), None)
            if pending is not None:
                pending.result = result
                pending.event.set()
        self.alive = False
        with self._lock:
            orphans, self._pending = self._pending, {}
        for pending in orphans.values():
            pending.result = {"status": "crash", "reason": "the sandbox worker died"}
            pending.event.set()

    def submit(self, payload: bytes, stdin: bytes, out_w: int, err_w: int, wall_s: float) -> tuple[int, _Pending]:
        """Start one call; the caller owns (and closes) `out_w`/`err_w` after this returns.

        The message is a JSON header line, then the payload when it is small; a large payload and
        a non-empty stdin travel as memfds (stdin as a file: reading it never blocks)."""
        inline = len(payload) <= INLINE_PAYLOAD
        extra = ([] if inline else [_memfd("tracerl-call", payload)]) + ([_memfd("tracerl-stdin", stdin)] if stdin else [])
        call_id = next(self._ids)
        pending = _Pending()
        header = json.dumps({"id": call_id, "wall_s": wall_s, "memfd": not inline, "stdin": bool(stdin)}).encode()
        try:
            with self._lock:
                if not self.alive:
                    raise WorkerDied("the sandbox worker is not running")
                self._pending[call_id] = pending
            try:
                socket.send_fds(self._sock, [header + b"\n" + (payload if inline else b"")], [out_w, err_w, *extra])
            except OSError as exc:
                with self._lock:
                    self._pending.pop(call_id, None)
                self.alive = False
                raise WorkerDied(f"could not reach the sandbox worker: {exc}") from exc
        finally:
            for fd in extra:
                os.close(fd)
        return call_id, pending

    def kill(self, call_id: int) -> None:
        """Ask the worker to kill a call's whole process tree now (it still reports)."""
        try:
            self._sock.sendmsg([json.dumps({"id": 0, "kill": call_id}).encode()])
        except OSError:
            pass

    def close(self) -> None:
        self.alive = False
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, 9)
            except OSError:
                self._proc.kill()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()
        if self.group is not None:
            self.group.remove()


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
