"""One thread per episode for its environment, so a turn's steps (tool calls) run at once.

Every call on an episode's env (reset, step, state_hash) runs on that episode's own thread: an env
may hold thread-bound resources (an SQLite connection must be used by the thread that opened it).
Threads are daemons, so a step that never returns can be abandoned — its episode becomes an
infrastructure failure — without holding the process at exit.
"""

from __future__ import annotations

import concurrent.futures as cf
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any


class EnvThread:
    """A daemon thread that runs the calls submitted to it one after another."""

    def __init__(self, name: str):
        self._q: queue.Queue = queue.Queue()
        self._t = threading.Thread(target=self._loop, name=name, daemon=True)
        self._t.start()

    def _loop(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            fut, fn, args = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as err:  # noqa: BLE001 - handed to the caller through the future
                fut.set_exception(err)

    def submit(self, fn: Callable, *args) -> cf.Future:
        fut: cf.Future = cf.Future()
        self._q.put((fut, fn, args))
        return fut

    def close(self) -> None:
        self._q.put(None)


def run_all(calls: Sequence[tuple[EnvThread | None, Callable, tuple]], timeout_s: float | None,
            futures_out: list | None = None) -> list[Any]:
    """Results in the order given; None for a call still running after `timeout_s` (abandoned).

    A call with no thread runs here, inline. A call's own exception is raised, as a direct call would.
    `futures_out` receives each call's future (None for inline calls), e.g. for a watchdog to name the slow ones.
    """
    futures = [th.submit(fn, *args) if th is not None else None for th, fn, args in calls]
    if futures_out is not None:
        futures_out.extend(futures)
    inline = [fn(*args) if th is None else None for th, fn, args in calls]
    live = [f for f in futures if f is not None]
    if live:
        cf.wait(live, timeout=timeout_s)
    return [r if f is None else (f.result() if f.done() else None) for f, r in zip(futures, inline)]
