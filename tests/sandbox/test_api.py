"""The Sandbox API on ordinary programs: results, inputs, limits, batching, levels, lifecycle."""

import threading

import pytest

import tracerl.sandbox.sandbox as sandbox_module
from tracerl.errors import UserError
from tracerl.sandbox import ExecResult, Limits, Sandbox, SandboxUnavailable, Status, default_sandbox
from tracerl.sandbox.backend import find_python, rlimits_plan

from sandbox_helpers import SMALL


def test_hello_world_result_fields(box):
    r = box.run("print(6 * 7)")
    assert isinstance(r, ExecResult)
    assert (r.status, r.exit_code, r.stdout, r.stderr) == (Status.OK, 0, "42\n", "")
    assert r.status == "ok" and r.ok
    assert 0 < r.wall_s < SMALL.wall_s and 0 <= r.cpu_s < SMALL.cpu_s and r.max_rss_bytes > 2**20


def test_stdin_files_and_working_directory(box):
    r = box.run("import os, sys\nprint(sys.stdin.read().upper(), open('data/in.txt').read(),\n"
                "      open('blob.bin', 'rb').read(), os.getcwd())",
                stdin="abc", files={"data/in.txt": "héllo", "blob.bin": b"\x00\x01"})
    assert r.status == "ok" and r.stdout == "ABC héllo b'\\x00\\x01' /work\n"


def test_program_can_import_its_own_files(box):
    r = box.run("import helper\nprint(helper.VALUE)", files={"helper.py": "VALUE = 7\n"})
    assert r.stdout == "7\n"


def test_exit_codes_and_exceptions(box):
    assert box.run("import sys\nsys.exit(3)").exit_code == 3
    assert box.run("import sys\nsys.exit('bye')").stderr == "bye\n"
    assert box.run("raise SystemExit").status == "ok"
    r = box.run("def f():\n    return 1 / 0\nf()")
    assert r.status == "error" and r.exit_code == 1
    assert 'File "<main>", line 2, in f' in r.stderr and r.stderr.endswith("ZeroDivisionError: division by zero\n")


def test_unicode_and_binary_output_round_trip(box):
    r = box.run("import sys\nprint('π ≈ 3.14 ✓')\nsys.stdout.flush()\nsys.stdout.buffer.write(b'\\xff\\n')")
    assert r.stdout == "π ≈ 3.14 ✓\n\ufffd\n"


def test_atexit_and_threads_finish_like_a_real_interpreter(box):
    r = box.run("import atexit, threading, time\natexit.register(lambda: print('bye'))\n"
                "t = threading.Thread(target=lambda: (time.sleep(0.05), print('thread')))\nt.start()\nprint('main')")
    assert r.stdout == "main\nthread\nbye\n"


@pytest.mark.parametrize("name", ["/etc/passwd", "../up.txt", "a/../../b", "", "./x", "a//b"])
def test_unsafe_file_names_are_blocked(box, name):
    r = box.run("print(1)", files={name: "x"})
    assert r.status == "blocked" and r.exit_code is None and "relative" in r.reason


def test_inputs_larger_than_the_disk_are_blocked(box):
    r = box.run("pass", files={"big.bin": b"0" * (SMALL.disk_bytes + 1)})
    assert r.status == "blocked" and "disk_bytes" in r.reason


def test_code_must_be_text(box):
    assert box.run(b"print(1)").status == "blocked"


@pytest.mark.parametrize("field, value", [("wall_s", 0), ("cpu_s", float("nan")), ("memory_bytes", -1),
                                          ("nproc", 1.5), ("nofile", 3), ("output_bytes", True)])
def test_bad_limits_are_user_errors(field, value):
    with pytest.raises(UserError, match=f"Limits.{field}"):
        Limits(**{field: value})


def test_run_many_keeps_order_and_runs_concurrently(box):
    codes = [f"import time\ntime.sleep(0.3)\nprint({i})" for i in range(8)]
    results = box.run_many(codes, concurrency=8)
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(8)]
    assert all(r.status == "ok" for r in results)


def test_run_many_with_per_program_stdin(box):
    results = box.run_many(["print(input())"] * 3, stdin=["a", "b", "c"])
    assert [r.stdout for r in results] == ["a\n", "b\n", "c\n"]
    with pytest.raises(UserError):
        box.run_many(["pass"] * 2, stdin=["only one"])


def test_many_threads_share_one_sandbox(box):
    out = [None] * 12

    def work(i):
        out[i] = box.run(f"print({i} * 2)").stdout

    threads = [threading.Thread(target=work, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == [f"{i * 2}\n" for i in range(12)]


def test_cold_mode_starts_a_fresh_isolated_worker_per_call():
    with Sandbox(limits=SMALL, warm=False) as cold:
        assert cold.run("print('cold')").stdout == "cold\n"
        assert cold.worker_pid() is None


def test_isolation_report_and_required_level(box):
    report = box.isolation_report()
    # full isolation misses nothing but, where the host cannot pin it, the OOM score floor
    assert report["level"] == "full" and all(m.startswith("OOM score not pinned") for m in report["missing"])
    assert any("network" in line for line in report["enforced"])
    Sandbox(require="full").close()
    with pytest.raises(UserError, match="not a level"):
        Sandbox(require="paranoid")


def test_requiring_full_isolation_where_only_rlimits_exist_is_refused(monkeypatch):
    plan = rlimits_plan(find_python(), "bubblewrap is not installed (simulated)")
    monkeypatch.setattr(sandbox_module, "_detect", lambda python: (plan, "simulated"))
    with pytest.raises(SandboxUnavailable, match="requires sandbox isolation 'full'"):
        Sandbox(require="full")
    with pytest.warns(RuntimeWarning, match="level 'rlimits'"), Sandbox(limits=SMALL) as weak:
        assert weak.level == "rlimits"
        r = weak.run("import os\nprint(open('note', 'w').write('ok'), os.getcwd() != '/work')")
        assert r.status == "ok" and r.stdout == "2 True\n"
        assert weak.run("while True: pass").status == "timeout"
        assert weak.run("x = bytearray(10 * 2**30)").status == "memory"


def test_closed_sandbox_refuses_and_default_is_shared():
    s = Sandbox(limits=SMALL)
    s.close()
    with pytest.raises(UserError, match="closed"):
        s.run("pass")
    assert default_sandbox() is default_sandbox()
    assert default_sandbox().run("print('shared')").stdout == "shared\n"


def _kill_worker_mid_call(s, code):
    """Start `code` in a thread, SIGKILL the warm worker while it runs; the call's result and the old pid."""
    import os
    import signal
    import time

    s.run("pass")
    first = s.worker_pid()
    results = []
    t = threading.Thread(target=lambda: results.append(s.run(code)))
    t.start()
    time.sleep(0.3)
    os.killpg(first, signal.SIGKILL)
    t.join()
    return results[0], first


def test_a_killed_worker_is_replaced_and_calls_in_flight_end_as_crash():
    """Infrastructure fault: the warm worker dies (OOM killer, operator). The call in flight is a
    `crash` (never a policy outcome) and the next call gets a fresh worker."""
    with Sandbox(limits=SMALL, crash_retries=0) as s:
        result, first = _kill_worker_mid_call(s, "import time\ntime.sleep(0.8)")
        assert result.status == "crash"
        again = s.run("print('fresh')")
        assert again.stdout == "fresh\n" and s.worker_pid() != first and again.attempts == 1


def test_a_call_whose_worker_died_is_retried_on_a_fresh_one():
    """With the default `crash_retries=1` the call in flight when its worker is killed is started
    again on a new worker: the caller sees the program's own outcome, with `attempts == 2`."""
    with Sandbox(limits=SMALL) as s:
        result, first = _kill_worker_mid_call(s, "import time\ntime.sleep(0.8)\nprint('done')")
        assert result.status == "ok" and result.stdout == "done\n" and result.attempts == 2
        assert s.worker_pid() != first
    with pytest.raises(UserError, match="crash_retries"):
        Sandbox(crash_retries=-1)


def test_a_forked_host_gets_its_own_worker():
    import os

    box = default_sandbox()
    box.run("pass")
    pid = os.fork()
    if pid == 0:
        ok = default_sandbox().run("print(7)").stdout == "7\n"
        default_sandbox().close()
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert status == 0
    assert box.run("print(8)").stdout == "8\n"


@pytest.mark.slow
def test_a_wedged_worker_is_replaced_after_the_host_grace():
    """Infrastructure fault: the worker stops answering (SIGSTOP). The host gives up after the wall
    clock plus its grace, reports `crash`, and the next call gets a fresh worker."""
    import os
    import signal

    from sandbox_helpers import descendants

    with Sandbox(limits=SMALL, crash_retries=0) as s:
        s.run("pass")
        first = s.worker_pid()
        for pid in descendants(first):
            os.kill(pid, signal.SIGSTOP)
        r = s.run("print(1)")
        assert r.status == "crash"
        assert s.run("print(2)").stdout == "2\n" and s.worker_pid() != first


def test_large_code_files_and_stdin_travel_intact(box):
    blob = bytes(range(256)) * 800  # 200 KB: beyond the inline message size, sent as a memfd
    text = "x" * 300_000
    r = box.run("import hashlib, sys\ndata = open('blob', 'rb').read()\n"
                "print(len(data), hashlib.sha256(data).hexdigest()[:8], len(sys.stdin.read()))\n# " + "pad " * 20000,
                files={"blob": blob}, stdin=text)
    import hashlib
    assert r.stdout == f"{len(blob)} {hashlib.sha256(blob).hexdigest()[:8]} {len(text)}\n"
