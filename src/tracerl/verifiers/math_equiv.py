"""Symbolic math equivalence: exact fast paths first, then sympy in killable, memory-capped workers.

Order of checks for `equivalent(answer, reference)`:
  1. both plain numbers (integers, decimals, fractions, \\frac{a}{b}, percentages): compared
     exactly when the reference is written exactly (`7`, `1/3`) and whenever both are integers;
     a relative tolerance only against a decimal reference, never wide enough to reach a
     different integer (`answers.numbers_match`), in this process;
  2. identical after normalization;
  3. both parsed and validated by `mathexpr` (no eval; power towers, huge exponents and the like
     refused in microseconds), then sent to a persistent sympy worker with a deadline. A worker
     that misses the deadline is SIGKILLed and replaced by a fork of a warm zygote that imported
     sympy once (no re-import); the check counts as not equivalent, with the reason "deadline".
     The zygote and its workers run under RLIMIT_AS.
"""

from __future__ import annotations

import ast
import json
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from importlib import resources
from typing import Any

from tracerl.verifiers.answers import normalize_text, numbers_match, parse_number, written_exactly
from tracerl.verifiers.base import AuditCase, VerifierResult, rejected, task_field, text_of
from tracerl.verifiers.extract import extract_answer
from tracerl.verifiers.mathexpr import ExprError, to_python


def _has_decimal(expr: str) -> bool:
    """Whether a validated expression (`mathexpr.to_python` output) holds a decimal literal."""
    return any(isinstance(n, ast.Constant) and isinstance(n.value, float) for n in ast.walk(ast.parse(expr, mode="eval")))


@dataclass(frozen=True)
class Equivalence:
    equal: bool
    reason: str
    path: str
    """Which check decided: 'number', 'text', 'sympy', 'refused', 'deadline'."""


def _recv_line(sock: socket.socket, buf: bytearray, timeout_s: float) -> str | None:
    """One line from `sock` within `timeout_s`, or None (deadline passed, or the peer closed)."""
    deadline = time.monotonic() + timeout_s
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([sock], [], [], left)[0]:
            return None
        try:
            chunk = sock.recv(65536)
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line.decode()


class _Zygote:
    """A process that imported sympy once and forks warm workers on request (see _math_worker.py)."""

    def __init__(self, python: str, memory_bytes: int, start_timeout_s: float = 60.0) -> None:
        source = resources.files("tracerl.verifiers").joinpath("_math_worker.py").read_text()
        boot = (f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({memory_bytes}, {memory_bytes})); "
                f"resource.setrlimit(resource.RLIMIT_CORE, (0, 0)); import sys; src = sys.stdin.readline(); "
                f"exec(compile(__import__('json').loads(src), 'tracerl-math-worker', 'exec'))")
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._buf, self._lock = bytearray(), threading.Lock()
        self.proc = subprocess.Popen([python, "-I", "-c", boot, "zygote", str(theirs.fileno())],
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True, text=True, pass_fds=[theirs.fileno()],
                                     env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
        theirs.close()
        self.proc.stdin.write(json.dumps(source) + "\n")
        self.proc.stdin.flush()
        hello = _recv_line(self.sock, self._buf, start_timeout_s)
        if hello is None or not json.loads(hello).get("ready"):
            self.close()
            raise RuntimeError("the sympy worker did not start (is sympy installed?)")

    def fork(self, timeout_s: float = 30.0) -> _Worker:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with self._lock:
            socket.send_fds(self.sock, [b"fork"], [theirs.fileno()])
            theirs.close()
            reply = _recv_line(self.sock, self._buf, timeout_s)
        if reply is None:
            mine.close()
            raise RuntimeError("the sympy zygote did not fork a worker (infrastructure)")
        return _Worker(self, mine, int(reply))

    def kill(self, pid: int) -> None:
        with self._lock:
            try:
                self.sock.sendall(f"kill {pid}".encode())
                _recv_line(self.sock, self._buf, 30.0)
            except OSError:
                pass

    def close(self) -> None:
        """Workers are killed and reaped by the zygote, which is then reaped here (so their CPU
        time is accounted to this process's children)."""
        with self._lock:
            try:
                self.sock.sendall(b"quit")
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                self.proc.wait()
            self.sock.close()
            try:
                self.proc.stdin.close()
            except OSError:
                pass


class _Worker:
    def __init__(self, zygote: _Zygote, sock: socket.socket, pid: int) -> None:
        self.zygote, self.sock, self.pid, self._buf = zygote, sock, pid, bytearray()

    def ask(self, request: dict, timeout_s: float) -> dict | None:
        """The answer, or None when the deadline passed or the worker died (then it is dead)."""
        try:
            self.sock.sendall((json.dumps(request) + "\n").encode())
        except OSError:
            return None
        line = _recv_line(self.sock, self._buf, timeout_s)
        return json.loads(line) if line else None

    def kill(self, wait: bool = True) -> None:
        self.zygote.kill(self.pid)
        self.sock.close()

    def reap(self) -> None:
        """Nothing left to do: the zygote reaps its workers."""


class MathEquivalence:
    """Reward 1 when the `<answer>` is mathematically equal to the task's `answer`."""

    name, revision = "math_equivalence", "2"  # 2: exact forms compared exactly (no tolerance)
    components, primary = ("correct", "format"), "correct"

    def __init__(self, *, timeout_s: float = 2.0, workers: int = 1, spares: int = 1, memory_bytes: int = 1 << 30,
                 rel_tol: float = 1e-9, python: str | None = None, wait_s: float = 60.0) -> None:
        """`workers` serve checks; `spares` more stand by so a killed worker is replaced at once.
        `timeout_s` is each check's deadline inside sympy; `wait_s` bounds the wait for a free
        worker (only long when every worker was just killed and is restarting)."""
        self.timeout_s, self.n_workers, self.memory_bytes = timeout_s, workers + spares, memory_bytes
        self.wait_s = wait_s
        self.rel_tol, self.python = rel_tol, python or sys.executable
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._lock = threading.Lock()
        self._started = False
        self._closed = False
        self.stats = {"number": 0, "text": 0, "sympy": 0, "refused": 0, "deadline": 0, "restarts": 0}

    def _ensure_started(self) -> None:
        with self._lock:
            if self._started:
                return
            self._zygote = _Zygote(self.python, self.memory_bytes)
            for _ in range(self.n_workers):
                self._idle.put(self._zygote.fork())
            self._started = True

    def _replace(self, dead: _Worker) -> None:
        self.stats["restarts"] += 1

        def start() -> None:
            dead.kill()
            try:
                if not self._closed:
                    self._idle.put(self._zygote.fork())
            except OSError:  # closed meanwhile
                pass

        threading.Thread(target=start, name="tracerl-math-worker-restart", daemon=True).start()

    def equivalent(self, answer: str, reference: str) -> bool:
        return self.check(answer, reference).equal

    def check(self, answer: str, reference: str) -> Equivalence:
        a_num, _ = parse_number(answer)
        b_num, _ = parse_number(reference)
        if a_num is not None and b_num is not None:
            self.stats["number"] += 1
            if written_exactly(reference):  # an exact reference (`7`, `1/3`) is met exactly
                return Equivalence(a_num == b_num, "" if a_num == b_num else "different numbers", "number")
            close, _ = numbers_match(a_num, b_num, self.rel_tol)  # integers exactly, else relative
            return Equivalence(close, "" if close else "different numbers", "number")
        if normalize_text(answer) == normalize_text(reference):
            self.stats["text"] += 1
            return Equivalence(True, "", "text")
        try:
            a_expr = to_python(answer)
        except ExprError as exc:
            self.stats["refused"] += 1
            return Equivalence(False, f"answer refused: {exc}", "refused")
        try:
            b_expr = to_python(reference)
        except ExprError as exc:
            raise ValueError(f"reference answer {reference!r} cannot be checked: {exc}") from None
        # A tolerance only where a decimal was written (an approximation); exact forms compare exactly.
        approx = _has_decimal(a_expr) or _has_decimal(b_expr)
        return self._ask({"a": a_expr, "b": b_expr, "tol": self.rel_tol if approx else 0.0,
                          "ref_exact": not _has_decimal(b_expr)})

    def _ask(self, request: dict) -> Equivalence:
        self._ensure_started()
        try:
            worker = self._idle.get(timeout=self.wait_s)
        except queue.Empty:
            raise RuntimeError(f"no sympy worker became free within {self.wait_s:g} s (infrastructure)") from None
        answer = worker.ask(request, self.timeout_s)
        if answer is None:
            # killed, reaped and replaced by the restart thread, so the caller returns at the deadline
            self._replace(worker)
            self.stats["deadline"] += 1
            return Equivalence(False, f"sympy missed the {self.timeout_s:g} s deadline (worker killed)", "deadline")
        self._idle.put(worker)
        self.stats["sympy"] += 1
        return Equivalence(bool(answer["equal"]), answer.get("reason", ""), "sympy")

    def verify(self, task: Any, trajectory: Any) -> VerifierResult:
        got = extract_answer(text_of(trajectory))
        if not got.ok:
            return rejected(self.components, got.reason)
        result = self.check(got.value, str(task_field(task, "answer")))
        return VerifierResult({"correct": float(result.equal), "format": 1.0},
                              {"answer": got.value, "path": result.path, "reason": result.reason})

    def worker_pids(self) -> list[int]:
        """The zygote's pid and its idle workers' (for CPU accounting)."""
        z = getattr(self, "_zygote", None)
        return ([z.proc.pid] if z is not None else []) + [w.pid for w in list(self._idle.queue)]

    def close(self) -> None:
        self._closed = True
        z = getattr(self, "_zygote", None)
        if z is not None:
            z.close()

    def __enter__(self) -> MathEquivalence:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def audit_cases(self) -> list[AuditCase]:
        half, poly = {"answer": "\\frac{1}{2}"}, {"answer": "2x + 2"}
        return [
            AuditCase("good-decimal", half, "<answer>0.5</answer>", True),
            AuditCase("good-latex", half, "<answer>$\\dfrac{2}{4}$</answer>", True),
            AuditCase("good-symbolic", poly, "<answer>2(x+1)</answer>", True),
            AuditCase("good-radical", {"answer": "2\\sqrt{2}"}, "<answer>\\sqrt{8}</answer>", True),
            AuditCase("good-pi", {"answer": "\\pi/2"}, "<answer>\\frac{\\pi}{2}</answer>", True),
            AuditCase("power-tower", half, "<answer>9^{9^{9^{9}}}</answer>", False, "power tower to hang the checker"),
            AuditCase("huge-exponent", half, "<answer>2^{100000000}</answer>", False, "huge exponent"),
            AuditCase("huge-factorial", half, "<answer>factorial(10^6)</answer>", False, "huge factorial"),
            AuditCase("nan", half, "<answer>nan</answer>", False, "NaN as the answer"),
            AuditCase("infinity", half, "<answer>\\infty</answer>", False, "infinity as the answer"),
            AuditCase("zero-over-zero", half, "<answer>0/0</answer>", False, "undefined value"),
            AuditCase("close-not-equal", {"answer": "1/3"}, "<answer>0.333333</answer>", False, "rounded decimal"),
            AuditCase("free-symbol", half, "<answer>x</answer>", False, "a bare variable"),
            AuditCase("code", half, "<answer>__import__('os').system('id')</answer>", False, "code injection"),
            AuditCase("hedge", half, "<answer>0.5</answer> or <answer>1</answer>", False, "two answers"),
            AuditCase("outside-tags", half, "The answer is 1/2.", False, "answer outside the tags"),
        ]
