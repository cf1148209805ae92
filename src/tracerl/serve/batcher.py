"""One thread owns the engine: concurrent calls with the same sampling settings share a batch.

A call with a `seed` runs alone under `torch.Generator().manual_seed(seed)`, so it samples exactly
what `engine.generate([prompt], ..., generator=that generator)` samples in-process. Calls without one
are batched (up to `max_batch`, gathering for `gather_s` after the first arrives) and drawn from the
worker's own seeded generator. The policy
version is read under the same lock that a weight update takes (`Gateway.set_policy_version`), so
every sample is tagged with the weights that produced it.

The worker thread survives any single request: whatever one batch raises (a bad seed, an engine
error) fails that batch's callers and the loop goes on; a caller whose wait passes `timeout_s` gets
`EngineTimeout` and its row is dropped if it has not started. A dead thread is restarted on the next
submit.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future

import torch


class EngineTimeout(TimeoutError):
    """A call waited longer than the worker's `timeout_s` for its sample."""


class EngineWorker:
    def __init__(self, engine, *, max_batch: int = 16, seed: int = 0, gather_s: float = 0.005,
                 timeout_s: float = 300.0):
        self.engine, self.max_batch, self.gather_s, self.timeout_s = engine, max_batch, gather_s, timeout_s
        self.lock = threading.Lock()  # held while sampling; a weight update takes it too
        self.policy_version = 0
        self._gen = torch.Generator().manual_seed(seed)
        self._q: queue.Queue = queue.Queue()
        self._held: list = []
        self._stop = False
        self.batches = self.rows = 0
        self._thread = threading.Thread(target=self._loop, name="tracerl-serve-engine", daemon=True)
        self._thread.start()

    def _wait(self, fut: Future):
        """The future's result within `timeout_s` (restarting a dead worker thread first)."""
        if not self._thread.is_alive() and not self._stop:
            self._thread = threading.Thread(target=self._loop, name="tracerl-serve-engine", daemon=True)
            self._thread.start()
        try:
            return fut.result(timeout=self.timeout_s)
        except TimeoutError:
            fut.cancel()  # not started yet: the worker skips it
            raise EngineTimeout(f"no sample within {self.timeout_s:g} s") from None

    def submit(self, prompt: list[int], budget: int, sampling: dict, stops: tuple[str, ...], seed: int | None,
               stop_ids: tuple[int, ...] = ()):
        """Blocks until sampled; returns (Sample, policy version). `stop_ids` end the row beside EOS."""
        fut: Future = Future()
        key = None if seed is not None else (sampling["temperature"], sampling["top_p"], sampling["top_k"], stops,
                                             tuple(stop_ids))
        self._q.put((key, prompt, budget, sampling, (stops, tuple(stop_ids)), seed, fut))
        return self._wait(fut)

    def close(self) -> None:
        self._stop = True
        self._q.put(None)
        self._thread.join(timeout=10)

    def _next(self, block: bool):
        if self._held:
            return self._held.pop(0)
        try:
            return self._q.get(block=block, timeout=0.5 if block else None)
        except queue.Empty:
            return None

    def _loop(self) -> None:
        while not self._stop:
            try:
                self._step()
            except Exception:  # never let one request end the worker; _run fails the batch's callers
                pass

    def _step(self) -> None:
        while not self._stop:
            first = self._next(True)
            if first is None:
                continue
            batch = [first]
            if first[0] is not None:  # gather what is waiting with the same settings
                skipped, deadline = [], time.monotonic() + self.gather_s
                while len(batch) < self.max_batch:
                    item = self._next(False)
                    if item is None:  # wait a moment for the other agents' calls of this turn
                        if time.monotonic() >= deadline:
                            break
                        time.sleep(0.0005)
                        continue
                    (batch if item[0] == first[0] else skipped).append(item)
                self._held = skipped + self._held
            batch = [b for b in batch if b[6].set_running_or_notify_cancel()]  # callers that timed out are gone
            if batch:
                self._run(batch)

    def _run(self, batch: list) -> None:
        try:
            _, _, _, sampling, (stops, stop_ids), seed, _ = batch[0]
            gen = torch.Generator().manual_seed(seed) if seed is not None else self._gen
            stop_ids = list(dict.fromkeys([self.engine.tokenizer.eos_token_id, *stop_ids]))
            with self.lock:
                version = self.policy_version
                samples = self.engine.generate([b[1] for b in batch], max_new_tokens=[b[2] for b in batch],
                                               stop_strings=stops, stop_token_ids=stop_ids,
                                               generator=gen, **sampling)
            self.batches += 1
            self.rows += len(batch)
            for b, s in zip(batch, samples):
                b[6].set_result((s, version))
        except Exception as err:  # the engine failed: every caller of this batch gets the error
            for b in batch:
                if not b[6].done():
                    b[6].set_exception(err)
