"""The warm worker outlives the thread that started it (its parent-death signal follows a thread).

On main of 2026-12-01 a worker started from a short-lived thread (an episode's env thread, a
caller's pool) was killed when that thread ended: every call in flight came back `crash` and
the next call paid a cold start."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from tracerl.sandbox import Sandbox


def test_worker_survives_its_starting_thread():
    with Sandbox() as box:
        t = threading.Thread(target=lambda: box.run("print(1)"))
        t.start()
        t.join()
        pid = box.worker_pid()
        time.sleep(0.3)
        assert box._worker.alive and box.run("print(2)").stdout == "2\n" and box.worker_pid() == pid


def test_concurrent_calls_from_successive_pools_never_crash():
    with Sandbox() as box:
        statuses = []
        for _ in range(3):  # each pool's threads end after its round
            with ThreadPoolExecutor(4) as pool:
                statuses += [r.status.value for r in pool.map(lambda i: box.run(f"print({i})"), range(4))]
        assert statuses == ["ok"] * 12
