"""The grader program run in the sandbox by UnitTestVerifier. Standard library only.

It holds no expected values: the hidden tests' inputs are in tests.json, their expected outputs
stay on the host. For each test it forks a child that loads the candidate (solution.py, a
pristine copy written for this run) and computes the output; the child hands back only bytes
(JSON for an expression, captured stdout for a program), so an object with a rigged __eq__
cannot survive the trip. The child cannot reach the grader: the grader is non-dumpable (no
ptrace, no /proc/<pid>/fd), and the child holds none of its descriptors.

After the last test the grader reads the per-run nonce from its stdin (which no child holds) and
prints one JSON line with the nonce and every result. A candidate that exits early, kills the
grader or skips the rest leaves no nonce line, and the host scores zero.
"""

import ctypes
import json
import os
import select
import signal
import sys
import time

PR_SET_DUMPABLE = 4
KEEP_OUTPUT = 4096


def _child(test, res_w, out_w):
    os.setsid()
    if test.get("stdin") is not None:
        fd = os.memfd_create("stdin")
        os.write(fd, test["stdin"].encode())
        os.lseek(fd, 0, os.SEEK_SET)
    else:
        fd = os.open("/dev/null", os.O_RDONLY)
    os.dup2(fd, 0)
    os.dup2(out_w, 1)
    # a program's stdout is compared as it is: its stderr (warnings, tracebacks) must not mix in
    os.dup2(os.open("/dev/null", os.O_WRONLY) if test["kind"] == "stdio" else out_w, 2)
    os.dup2(res_w, 3)
    os.closerange(4, 1 << 16)
    import io
    import runpy
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8")
    sys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8",
                                  line_buffering=True)
    sys.argv = ["solution.py"]
    if test["kind"] == "stdio":
        runpy.run_path("solution.py", run_name="__main__")
        sys.stdout.flush()
        os.write(3, b'{"done": true}')
        os._exit(0)
    try:
        namespace = runpy.run_path("solution.py", run_name="solution")
        value = eval(test["expr"], namespace)  # the test's own expression, e.g. "add(2, 3)"
    except BaseException as exc:  # noqa: BLE001 - its name is this test's feedback, nothing more
        payload = json.dumps({"raised": str(type(exc).__name__)[:80]})
    else:
        try:
            payload = json.dumps({"value": value}, allow_nan=False)
        except (TypeError, ValueError, RecursionError):  # not JSON data: it fails, with its repr as feedback
            try:
                payload = json.dumps({"unserializable": str(repr(value))[:200]})
            except BaseException:  # noqa: BLE001
                payload = json.dumps({"unserializable": "?"})
    try:
        sys.stdout.flush()
    except BaseException:  # noqa: BLE001
        pass
    os.write(3, payload.encode())
    os._exit(0)


def _collect(pid, res_r, out_r, timeout_s, out_cap):
    bufs = {res_r: bytearray(), out_r: bytearray()}
    caps = {res_r: 1 << 20, out_r: out_cap}
    open_fds = [res_r, out_r]
    deadline = time.monotonic() + timeout_s
    timed_out = False
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select(open_fds, [], [], left)
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.remove(fd)
            elif len(bufs[fd]) < caps[fd]:
                bufs[fd] += chunk[:caps[fd] - len(bufs[fd])]
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    _, status = os.waitpid(pid, 0)
    return bytes(bufs[res_r]), bytes(bufs[out_r]), timed_out, status


def _reject_constant(name):
    raise ValueError(f"non-finite number {name}")


def main():
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    with open("tests.json") as f:
        spec = json.load(f)
    os.unlink("tests.json")
    results = []
    try:
        with open("solution.py") as f:
            compile(f.read(), "solution.py", "exec")
        syntax_ok = True
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        syntax_ok = False
        results = [{"ran": False, "error": f"solution does not compile: {type(exc).__name__}"}] * len(spec["tests"])
    for test in spec["tests"] if syntax_ok else []:
        res_r, res_w = os.pipe()
        out_r, out_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(res_r)
                os.close(out_r)
                _child(test, res_w, out_w)
            except BaseException as exc:  # noqa: BLE001 - the reason, for the report
                try:
                    sys.stderr.write(f"{type(exc).__name__}: {exc}"[:300] + "\n")
                    sys.stderr.flush()
                except BaseException:  # noqa: BLE001
                    pass
            finally:
                os._exit(1)
        os.close(res_w)
        os.close(out_w)
        out_cap = spec["stdout_bytes"] if test["kind"] == "stdio" else KEEP_OUTPUT
        res, out, timed_out, status = _collect(pid, res_r, out_r, spec["timeout_s"], out_cap)
        os.close(res_r)
        os.close(out_r)
        entry = {"ran": False, "output": out.decode("utf-8", "replace")[:out_cap]}
        if timed_out:
            entry["error"] = f"timed out after {spec['timeout_s']} s"
        else:
            try:
                message = json.loads(res.decode(), parse_constant=_reject_constant) if res else None
            except ValueError as exc:
                message = None
                entry["error"] = f"unreadable result: {exc}"[:200]
            if isinstance(message, dict) and ("value" in message or message.get("done") is True):
                entry["ran"] = True
                if "value" in message:
                    entry["value"] = message["value"]
            elif isinstance(message, dict) and isinstance(message.get("raised"), str):
                entry["error"] = "raised " + message["raised"][:80]
            elif isinstance(message, dict) and isinstance(message.get("unserializable"), str):
                entry["error"] = "returned " + message["unserializable"][:200] + " (not JSON data)"
            elif "error" not in entry:
                last = entry["output"].strip().splitlines()[-1:] or [f"exit status {status}"]
                entry["error"] = f"no result ({last[0][:200]})"
        results.append(entry)
    nonce = os.read(0, 256).decode().strip()
    sys.stdout.write(json.dumps({"nonce": nonce, "syntax_ok": syntax_ok, "results": results}) + "\n")
    sys.stdout.flush()


main()
