"""`Sandbox`: run untrusted Python with kernel-enforced limits and return a structured result.

What is isolated (level "full", bubblewrap + namespaces, see `isolation_report()`):
  * files: the program sees a read-only /usr and system libraries only; /work (its cwd), /tmp and
    /dev/shm are a fresh size-capped tmpfs per call, gone when the call ends. The host's home,
    project, grader files and hidden tests are not mounted at all.
  * processes: a new PID namespace per call (it sees only its own processes) whose teardown at
    the wall-clock limit kills every descendant, daemons included; RLIMIT_NPROC is counted in the
    call's own user namespace.
  * network: a fresh, empty network namespace per call (no interface up, not even loopback):
    no counter, socket or name of an earlier or concurrent call is visible.
  * identity: an unprivileged host uid (nobody) when the host runs as root; a user namespace of
    its own with no way to create another; zero capabilities, no_new_privs; a clean environment;
    a fresh session keyring and no key system calls (seccomp: add_key, request_key, keyctl fail
    with EPERM, so the host uid's shared key quota cannot be used up); no inherited file
    descriptors besides stdin/out/err; no signal reaches the call's init.
  * resources: CPU seconds, address space, processes, file size, open files, tmpfs size, output
    bytes, wall clock; where the host is root with cgroup v1 memory, one memory group per call
    holding everything the call has (processes, memfds, tmpfs pages) to memory_bytes + disk_bytes.
  * inputs: code, stdin, files and limits are checked once on a copy (sandbox.inputs); what
    could fail inside the call's setup is refused up front as `blocked`.

What is NOT isolated:
  * the kernel itself: a kernel exploit escapes (there is no seccomp filter and no VM);
  * side channels: timing, cache, CPU frequency and co-tenant load are shared with the host;
  * covert signalling between *concurrent* calls through the shared read-only files (advisory
    locks or inotify on /usr): no data is stored, but two live calls could agree on bits;
  * memory, where cgroups are not usable (not root, or a cgroup v2 group that does not delegate
    memory and pids): RLIMIT_AS is per process, so nproc x memory_bytes bounds a call, and tmpfs
    and memfd pages count against no rlimit. Where the cgroup v1 memory and pids hierarchies are
    writable by a root host (or a v2 group delegates both; untested on a real v2 host), each call
    has its own memory group and all calls of a worker together are capped at
    `total_memory_bytes` (see sandbox.cgroups);
  * the OOM score, where the host's root lacks CAP_SYS_RESOURCE (containers): programs start at
    1000 but may lower it; their own memory group confines the OOM killer to their call, but in
    a machine-wide OOM a program that lowered its score is not the first pick. With the
    capability the root launcher's write pins the floor at 1000 (`isolation_report()` says which);
  * CPU share: a call can use every core up to its CPU-seconds budget (no cgroup quota);
  * the read-only view of /usr is the host's: installed packages and their versions are visible.
At level "rlimits" (no bubblewrap / user namespaces) far less holds; the sandbox warns at start
and `isolation_report()` lists what is missing. `Sandbox(require="full")` refuses to run there.
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import signal
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from tracerl.errors import UserError
from tracerl.sandbox.backend import LEVELS, Plan, find_python, full_plan, rlimits_plan
from tracerl.sandbox.limits import ExecResult, Limits, Status
from tracerl.sandbox import cgroups, inputs
from tracerl.sandbox.worker import MAX_PIDS, Worker, WorkerDied

MEMORY_EXIT = 250  # mirrors _program.MEMORY_EXIT
HOST_GRACE_S = 5.0  # past the zygote's own backstop (2 s): only a wedged zygote gets here
RESULT_CHECK_S = 0.02  # while the pipes stay open, how often the host looks for the result message

_plans: dict[str, tuple[Plan, str]] = {}
_plans_lock = threading.Lock()


class SandboxUnavailable(UserError):
    """The machine cannot provide the isolation level a recipe requires."""


_starter: ThreadPoolExecutor | None = None
_starter_pid: int | None = None
_starter_lock = threading.Lock()
_STARTER_NAME = "tracerl-sandbox-parent"


def on_lasting_thread(fn, *args):
    """Run `fn(*args)` on a thread that lives as long as the process.

    The warm worker's parent-death signal (bubblewrap `--die-with-parent`, i.e. PR_SET_PDEATHSIG)
    fires when the *thread* that forked it exits, not the process. A worker started from a
    short-lived thread (an episode's env thread, a caller's thread pool) was killed when that
    thread ended, and every call in flight came back `crash`. So workers are forked from here.
    """
    global _starter, _starter_pid
    if threading.current_thread().name.startswith(_STARTER_NAME):
        return fn(*args)
    with _starter_lock:
        if _starter is None or _starter_pid != os.getpid():
            _starter, _starter_pid = ThreadPoolExecutor(1, thread_name_prefix=_STARTER_NAME), os.getpid()
        starter = _starter
    return starter.submit(fn, *args).result()


def _detect(python: str) -> tuple[Plan, str]:
    """The strongest plan that starts here, with a note when it is not the full one (cached)."""
    with _plans_lock:
        if python in _plans:
            return _plans[python]
        plan, note = full_plan(python), ""
        if plan is None:
            note = "bubblewrap (bwrap) is not installed; run `make system-deps` or apt-get install bubblewrap"
        else:
            try:
                Worker(plan).close()
            except WorkerDied as exc:
                note = f"bubblewrap could not start an isolated worker: {exc}"
                plan = None
        if plan is None:
            plan = rlimits_plan(python, note)
        _plans[python] = (plan, note)
        return plan, note


class Sandbox:
    """Runs Python source in isolation. Cheap to construct; the warm worker starts on first use.

    `warm=True` keeps one pre-imported worker that forks per call (a few ms); `warm=False` starts
    a fresh isolated interpreter per call. Thread-safe: call `run` from many threads, or use
    `run_many`. Close with `close()` or a `with` block.
    """

    def __init__(self, *, limits: Limits | None = None, require: str | None = None, warm: bool = True,
                 python: str | None = None, max_workers: int = 8,
                 total_memory_bytes: int | None | str = "auto", preload: tuple[str, ...] = (),
                 crash_retries: int = 1) -> None:
        """`total_memory_bytes` caps the memory of all calls in flight together (tmpfs included),
        where cgroups allow it (see sandbox.cgroups); "auto" is half the machine's memory, at
        most 16 GiB; None turns the cap off. A call that ends in `crash` (the sandbox failed, not
        the program) is started again up to `crash_retries` times, on a fresh worker when the old
        one died; `ExecResult.attempts` says how many starts it took."""
        if not isinstance(crash_retries, int) or isinstance(crash_retries, bool) or not 0 <= crash_retries <= 10:
            raise UserError(f"Sandbox(crash_retries={crash_retries!r}) must be an integer from 0 to 10.")
        self.crash_retries = crash_retries
        if require is not None and require not in LEVELS:
            raise UserError(f"Sandbox(require={require!r}) is not a level; choose one of {', '.join(LEVELS)}.")
        self.limits = limits or Limits()
        self.warm = warm
        self.python = find_python(python)
        self.preload = tuple(preload)  # modules the warm worker imports once, beside the standard ones
        self.max_workers = max_workers
        if total_memory_bytes == "auto":
            total_memory_bytes = min(16 << 30, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2)
        self.total_memory_bytes = total_memory_bytes
        self._worker: Worker | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        self._plan: Plan | None = None
        if require is not None:
            plan, _ = _detect(self.python)
            if LEVELS.index(plan.level) < LEVELS.index(require):
                raise SandboxUnavailable(
                    f"this recipe requires sandbox isolation '{require}' but this machine provides "
                    f"'{plan.level}' ({'; '.join(plan.missing)}); run `tracerl doctor` for details.")

    @property
    def plan(self) -> Plan:
        if self._plan is None:
            self._plan, note = _detect(self.python)
            if note:
                warnings.warn(f"tracerl sandbox runs at level '{self._plan.level}': {note}", RuntimeWarning, stacklevel=3)
        return self._plan

    @property
    def level(self) -> str:
        return self.plan.level

    def worker_pid(self) -> int | None:
        """Host pid of the warm worker's outermost process (None before the first call)."""
        worker = self._worker
        return worker.pid if worker is not None and worker.alive else None

    def isolation_report(self) -> dict:
        """What this machine enforces for this sandbox: level, enforced and missing protections."""
        plan = self.plan
        enforced, missing = list(plan.enforced), list(plan.missing)
        capped, why = cgroups.available()
        if plan.level == "full" and self.total_memory_bytes and capped:
            enforced.append(f"cgroup: all calls in flight together hold at most {self.total_memory_bytes / 2**30:.1f} GiB "
                            f"(tmpfs included) and {MAX_PIDS} processes; the largest program is OOM-killed first")
        else:
            missing.append(why or "total memory across calls is not capped (total_memory_bytes=None)")
        pinned, why = cgroups.oom_floor_pinned()
        if plan.level == "full" and plan.run_as is not None and pinned:
            enforced.append("OOM score: every program is the OOM killer's first pick and cannot lower its score")
        else:
            missing.append(why or "OOM score not pinned at this isolation level")
        return {"level": plan.level, "python": plan.python, "enforced": enforced, "missing": missing,
                "command": " ".join(plan.argv[:-1] + ["<worker>"])}

    def _get_worker(self) -> Worker:
        if os.getpid() != self._pid:  # a forked copy of the host: the worker and its reader belong to the parent
            self._lock, self._pid, self._worker, self._pool = threading.Lock(), os.getpid(), None, None
        with self._lock:
            if self._closed:
                raise UserError("this Sandbox was closed; create a new one or use tracerl.sandbox.default_sandbox().")
            if self._worker is None or not self._worker.alive:
                if self._worker is not None:
                    self._worker.close()
                self._worker = on_lasting_thread(self._start_worker, True)
            return self._worker

    def _start_worker(self, warm: bool) -> Worker:
        try:
            return Worker(self.plan, warm=warm, total_memory_bytes=self.total_memory_bytes, preload=self.preload)
        except WorkerDied as exc:
            if not self.total_memory_bytes:
                raise
            warnings.warn(f"tracerl sandbox: a worker inside a memory cgroup did not start ({exc}); "
                          "continuing without the total-memory cap", RuntimeWarning, stacklevel=4)
            self.total_memory_bytes = None
            return Worker(self.plan, warm=warm, preload=self.preload)

    def run(self, code: str, *, stdin: str | bytes = "", files: Mapping[str, str | bytes] | None = None,
            limits: Limits | None = None) -> ExecResult:
        """Run `code` as a Python program with `stdin`, `files` in its working directory, `limits`."""
        limits = self.limits if limits is None else limits
        checked = inputs.check(code, stdin, files, limits)
        if isinstance(checked, str):
            return ExecResult(Status.BLOCKED, None, "", "", reason=checked)
        payload, stdin_bytes = checked
        for attempt in range(1, self.crash_retries + 2):
            result = self._attempt(payload, stdin_bytes, limits)
            if result.status is not Status.CRASH or attempt > self.crash_retries:
                return dataclasses.replace(result, attempts=attempt) if attempt > 1 else result
        raise AssertionError("unreachable")

    def _attempt(self, payload: bytes, stdin_bytes: bytes, limits: Limits) -> ExecResult:
        cold = None
        try:
            worker = self._get_worker() if self.warm else (cold := self._start_worker(warm=False))
        except WorkerDied as exc:
            return ExecResult(Status.CRASH, None, "", "", reason=str(exc))
        try:
            return self._run_on(worker, payload, stdin_bytes, limits)
        finally:
            if cold is not None:
                cold.close()

    def _run_on(self, worker: Worker, payload: bytes, stdin: bytes, limits: Limits) -> ExecResult:
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        start = time.monotonic()
        ooms = worker.group.oom_kills() if worker.group is not None else 0
        try:
            try:
                call_id, pending = worker.submit(payload, stdin, out_w, err_w, limits.wall_s)
            finally:
                os.close(out_w)
                os.close(err_w)
        except WorkerDied as exc:
            os.close(out_r)
            os.close(err_r)
            return ExecResult(Status.CRASH, None, "", "", reason=str(exc))
        deadline = start + limits.wall_s + HOST_GRACE_S
        streams, overflow, stuck = _collect(out_r, err_r, limits.output_bytes, deadline,
                                            lambda: worker.kill(call_id), pending.event)
        if stuck:  # the worker failed to enforce its own deadline: replace it, report infra fault
            worker.close()
        pending.event.wait(max(0.0, deadline + HOST_GRACE_S - time.monotonic()))
        result = pending.result or {"status": "crash", "reason": "no result from the sandbox worker by the deadline"}
        oom = worker.group is not None and worker.group.oom_kills() > ooms
        return _classify(result, streams, overflow, limits, time.monotonic() - start, oom)

    def run_many(self, codes: Sequence[str], *, stdin: str | Sequence[str] = "",
                 files: Mapping | Sequence[Mapping] | None = None, limits: Limits | None = None,
                 concurrency: int | None = None) -> list[ExecResult]:
        """Run many programs concurrently (up to `concurrency`, default `max_workers`); order kept."""
        n = len(codes)
        stdins = [stdin] * n if isinstance(stdin, (str, bytes)) else list(stdin)
        files_list = [files] * n if files is None or isinstance(files, Mapping) else list(files)
        if len(stdins) != n or len(files_list) != n:
            raise UserError("run_many: stdin and files must be one value or one per program.")
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="tracerl-sandbox")
            pool = self._pool
        width = min(concurrency or self.max_workers, self.max_workers)
        gate = threading.Semaphore(width)

        def one(i: int) -> ExecResult:
            with gate:
                return self.run(codes[i], stdin=stdins[i], files=files_list[i], limits=limits)

        return list(pool.map(one, range(n)))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            worker, self._worker = self._worker, None
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        if worker is not None:
            worker.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _collect(out_r: int, err_r: int, cap: int, deadline: float, kill, done: threading.Event
             ) -> tuple[list[bytearray], list[bool], bool]:
    """Read both pipes, keeping `cap` bytes of each and killing the call on overflow, until both
    reach EOF or the call's result message has arrived (`done`): then what is already in the
    pipes is drained and reading stops. A program that keeps the write ends alive past its own
    end (an unreachable SCM_RIGHTS cycle) so costs nothing but itself."""
    bufs, overflow = [bytearray(), bytearray()], [False, False]
    index = {out_r: 0, err_r: 1}
    poller = select.poll()
    for fd in index:
        poller.register(fd, select.POLLIN)
    open_fds, stuck, draining = 2, False, False
    try:
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                stuck = not done.is_set()
                break
            if not draining and done.is_set():
                draining = True
            events = poller.poll(0 if draining else min(left, RESULT_CHECK_S) * 1000)
            if draining and not events:
                break
            for fd, _ in events:
                chunk = os.read(fd, 1 << 16)
                idx = index[fd]
                if not chunk:
                    poller.unregister(fd)
                    open_fds -= 1
                    continue
                room = cap - len(bufs[idx])
                if len(chunk) > room:
                    bufs[idx] += chunk[:max(room, 0)]
                    if not any(overflow):
                        kill()
                    overflow[idx] = True
                else:
                    bufs[idx] += chunk
    finally:
        os.close(out_r)
        os.close(err_r)
    return bufs, overflow, stuck


def _classify(r: dict, streams, overflow, limits: Limits, host_wall: float, oom: bool = False) -> ExecResult:
    out, err = (b.decode("utf-8", errors="replace") for b in streams)
    common = dict(stdout=out, stderr=err, stdout_truncated=overflow[0], stderr_truncated=overflow[1],
                  wall_s=float(r.get("wall_s", host_wall)), cpu_s=float(r.get("cpu_s", 0.0)),
                  max_rss_bytes=int(r.get("max_rss_bytes", 0)), memory_peak_bytes=int(r.get("memory_peak_bytes", 0)))
    call_cap = limits.memory_bytes + limits.disk_bytes
    ws = r.get("wait_status")
    exit_code = os.waitstatus_to_exitcode(ws) if ws is not None else None
    if any(overflow):
        which = " and ".join(n for n, o in zip(("stdout", "stderr"), overflow) if o)
        return ExecResult(Status.OUTPUT_LIMIT, exit_code, reason=f"{which} exceeded {limits.output_bytes} bytes; killed", **common)
    if r.get("status") == "memory":
        return ExecResult(Status.MEMORY, None, reason=f"OOM-killed at the call's memory cap of {call_cap} bytes "
                          "(memory_bytes + disk_bytes)", **common)
    if r.get("status") == "crash" or (ws is None and r.get("status") != "timeout"):
        return ExecResult(Status.CRASH, None, reason=r.get("reason", "the sandbox failed"), **common)
    if r.get("timed_out") or r.get("status") == "timeout":
        return ExecResult(Status.TIMEOUT, exit_code, reason=f"wall-clock limit of {limits.wall_s:g} s reached; process tree killed", **common)
    if exit_code == -signal.SIGKILL and oom:
        return ExecResult(Status.MEMORY, exit_code, reason="OOM-killed at the sandbox's total memory cap", **common)
    if exit_code == -signal.SIGKILL and r.get("oom_kills") and common["memory_peak_bytes"] < call_cap - (8 << 20):
        return ExecResult(Status.MEMORY, exit_code, reason="OOM-killed at the sandbox's total memory cap", **common)
    if exit_code == -signal.SIGKILL and r.get("oom_kills"):
        return ExecResult(Status.MEMORY, exit_code, reason=f"OOM-killed at the call's memory cap of {call_cap} bytes "
                          "(memory_bytes + disk_bytes)", **common)
    if exit_code is not None and exit_code < 0:
        sig = -exit_code
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and common["cpu_s"] >= limits.cpu_s):
            return ExecResult(Status.TIMEOUT, exit_code, reason=f"CPU limit of {limits.cpu_s:g} s reached", **common)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return ExecResult(Status.ERROR, exit_code, reason=f"killed by signal {name}", **common)
    if exit_code == MEMORY_EXIT:
        return ExecResult(Status.MEMORY, 1, reason=f"out of memory (limit {limits.memory_bytes} bytes of address space)", **common)
    if exit_code == 0:
        return ExecResult(Status.OK, 0, **common)
    return ExecResult(Status.ERROR, exit_code, reason=f"exited with code {exit_code}", **common)
