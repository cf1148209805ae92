"""Episodes over HTTP: start one, attach calls to it, finish it with a reward or a task id.

An episode ends exactly once, with a `TerminalReason`:
- finished with `reward`: one component `reward` (weight 1), reason `eos`;
- finished with `task_id`: the task's verifier (the environment's own step on the final answer)
  gives the components and the reason;
- finished with `error` (the agent failed), or open when the gateway shuts down: `infra_failure`,
  no reward;
- idle for longer than `idle_timeout_s` (abandoned): `wall_timeout`, no reward.
Nothing ends silently: each ending is written to the span log beside the calls it closes.

An episode belongs to the principal that started it (the API key, guard.py) and has a token returned
once, at its start (`episode_token`): reading it, finishing it or attaching a call to it needs the
same key or the token (403 otherwise; with `require_token`, the token always). Memory is bounded:
finished episodes are evicted `finished_ttl_s` after they end (the span log keeps them), at most
`max_episodes` are held (the oldest finished go first; when all are open a start is refused, 429),
an episode takes at most `max_calls_per_episode` calls, and calls outside any episode are kept in a
ring of `max_loose_calls`.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from pathlib import Path

from tracerl.contract.roles import TerminalReason
from tracerl.envs._verify import declared_verifier
from tracerl.serve.errors import APIError, bad_request, conflict, not_found
from tracerl.serve.records import CallRecord, Episode
from tracerl.serve.spanlog import SpanLog
from tracerl.serve.trajectories import build_trajectories

# (task_id, answer text) -> (components, weights, reason, raw verifier output)
Verifier = Callable[[str, str], tuple[dict[str, float], dict[str, float], TerminalReason, dict]]


class EnvVerifier:
    """A task's verifier: a fresh environment, reset on the task, stepped once on the final answer."""

    def __init__(self, spec, tasks):
        self.spec, self.tasks = spec, {t.id: t for t in tasks}
        self.name, self.revision = declared_verifier(spec)  # the registered verifier the env's step runs

    def add(self, tasks) -> None:
        self.tasks.update({t.id: t for t in tasks})

    def knows(self, task_id: str) -> bool:
        return task_id in self.tasks

    def __call__(self, task_id: str, answer: str):
        env = self.spec.make()
        env.reset(self.tasks[task_id], 0)
        step = env.step(answer)
        comps = {k: 0.0 for k in self.spec.reward_weights}
        if step.terminated and step.terminal_reason != TerminalReason.INFRA_FAILURE:
            comps.update(step.reward_components)
        reason = (step.terminal_reason or TerminalReason.EOS) if step.terminated else TerminalReason.ENV_FAILURE
        raw = {k: v for k, v in (step.info or {}).items() if isinstance(v, (str, int, float, bool))}
        return comps, dict(self.spec.reward_weights), reason, raw


class BoundedDict(OrderedDict):
    """A dict that forgets its oldest entries beyond `maxlen`."""

    def __init__(self, maxlen: int):
        super().__init__()
        self.maxlen = maxlen

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.maxlen:
            self.popitem(last=False)


class EpisodeRegistry:
    """Thread-safe store of episodes and their calls; optionally appends every record to a JSONL log."""

    def __init__(self, *, verifier: Verifier | None = None, idle_timeout_s: float = 600.0,
                 span_log: str | Path | None = None, env_name: str = "gateway", tokenizer_hashes: dict | None = None,
                 finished_ttl_s: float | None = 600.0, max_episodes: int = 10_000, max_calls_per_episode: int = 1024,
                 max_loose_calls: int = 1024, require_token: bool = False, span_log_max_bytes: int | None = None):
        self.verifier, self.idle_timeout_s = verifier, idle_timeout_s
        self.env_name, self.tokenizer_hashes = env_name, tokenizer_hashes or {}
        self.finished_ttl_s, self.max_episodes = finished_ttl_s, max_episodes  # None: kept until pop()
        self.max_calls_per_episode, self.require_token = max_calls_per_episode, require_token
        self._eps: dict[str, Episode] = {}
        self._access: dict[str, tuple[str, str]] = {}  # episode id -> (owner principal, token)
        self._loose: deque[CallRecord] = deque(maxlen=max_loose_calls)  # calls outside any episode (logged)
        self.evicted = 0
        self._lock = threading.RLock()
        self._log = SpanLog(span_log, span_log_max_bytes) if span_log else None  # rotated to .1 past the cap

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self, episode_id: str | None = None, *, task_id: str | None = None, group_id: str | None = None,
              metadata: dict | None = None, principal: str = "") -> Episode:
        with self._lock:
            eid = episode_id or uuid.uuid4().hex[:16]
            if len(self._eps) >= self.max_episodes:
                self._evict(len(self._eps) - self.max_episodes + 1)
            if len(self._eps) >= self.max_episodes:
                raise APIError(429, f"this gateway holds {self.max_episodes} open episodes; finish some before "
                                    "starting more", code="too_many_episodes")
            if eid in self._eps:
                raise conflict(f"episode {eid!r} already exists; start a new one with another id or omit the id",
                               param="episode_id", code="episode_exists")
            if task_id is not None and self.verifier is not None and hasattr(self.verifier, "knows") \
                    and not self.verifier.knows(task_id):
                raise not_found(f"task {task_id!r} is not known to this gateway; start the episode with a task id it "
                                "serves, or without one", param="task_id", code="task_not_found")
            now = time.time()
            ep = Episode(eid, task_id, group_id, dict(metadata or {}), now, now)
            self._eps[eid] = ep
            self._access[eid] = (principal, secrets.token_urlsafe(18))
            self._write({"record": "episode_start", **ep.summary()})
            return ep

    def get(self, episode_id: str, *, principal: str | None = None, token: str | None = None) -> Episode:
        """The episode; with `principal` (an HTTP caller), only for its owner or the holder of its token."""
        with self._lock:
            ep = self._eps.get(episode_id)
            owner, secret = self._access.get(episode_id, ("", ""))
        if ep is None:
            raise not_found(f"episode {episode_id!r} does not exist (or was evicted after it ended); start it with "
                            "POST /v1/episodes first", param="episode_id", code="episode_not_found")
        if principal is not None:
            by_token = token is not None and hmac.compare_digest(token.encode(), secret.encode())
            if not by_token and (self.require_token or principal != owner):
                raise APIError(403, f"episode {episode_id!r} belongs to another client; use the API key that started "
                                    "it or send its 'X-Episode-Token' (returned when it started)",
                               type="permission_error", param="episode_id", code="episode_forbidden")
        return ep

    def token(self, episode_id: str) -> str:
        with self._lock:
            return self._access.get(episode_id, ("", ""))[1]

    def open_episode(self, episode_id: str, *, principal: str | None = None, token: str | None = None) -> Episode:
        """The episode a call attaches to; 404 when unknown, 403 when not the caller's, 409 when it has ended."""
        ep = self.get(episode_id, principal=principal, token=token)
        if ep.finished:
            raise conflict(f"episode {episode_id!r} has already ended ({ep.terminal_reason.value}); start a new one",
                           param="episode_id", code="episode_finished")
        if len(ep.calls) >= self.max_calls_per_episode:
            raise conflict(f"episode {episode_id!r} already has {len(ep.calls)} calls, this gateway's limit; finish it "
                           "and start a new one", param="episode_id", code="episode_too_long")
        return ep

    def record(self, call: CallRecord) -> None:
        with self._lock:
            ep = self._eps.get(call.episode_id) if call.episode_id else None
            if ep is None or ep.finished:  # none named, or it ended while this call ran: kept, never merged
                self._loose.append(call)
            else:
                ep.calls.append(call)
                ep.last_activity = time.time()
            self._write({"record": "call", **call.as_json()})

    def finish(self, episode_id: str, *, reward: float | None = None, task_id: str | None = None,
               answer: str | None = None, error: str | None = None, principal: str | None = None,
               token: str | None = None) -> Episode:
        with self._lock:
            ep = self.get(episode_id, principal=principal, token=token)
            ep = self.open_episode(episode_id)
            if error is not None:
                return self._end(ep, TerminalReason.INFRA_FAILURE, {}, {}, {"infra": error[:500]})
            if reward is not None:
                return self._end(ep, TerminalReason.EOS, {"reward": float(reward)}, {"reward": 1.0}, {})
            tid = task_id or ep.task_id
            if self.verifier is None:
                raise bad_request("this gateway has no task verifiers; finish the episode with a 'reward' instead",
                                  param="task_id", code="no_verifier")
            if hasattr(self.verifier, "knows") and not self.verifier.knows(tid):
                raise not_found(f"task {tid!r} is not known to this gateway; finish with a task id it serves or a "
                                "'reward'", param="task_id", code="task_not_found")
            text = answer if answer is not None else self._last_text(ep)
            comps, weights, reason, raw = self.verifier(tid, text)
            if ep.calls and ep.calls[-1].finish_reason == "length":  # cut off mid-answer: a truncation, no reward
                comps, reason = {k: 0.0 for k in comps}, TerminalReason.MAX_TOKENS
            ep.task_id = tid
            ep.verifier_name = getattr(self.verifier, "name", "")
            ep.verifier_revision = getattr(self.verifier, "revision", "")
            return self._end(ep, reason, comps, weights, raw)

    def abandon(self, episode_id: str, reason: TerminalReason, why: str) -> Episode:
        with self._lock:
            ep = self.get(episode_id)
            if ep.finished:
                return ep
            return self._end(ep, reason, {}, {}, {"abandoned": why})

    def reap(self, now: float | None = None) -> list[str]:
        """End every open episode idle for longer than `idle_timeout_s` as `wall_timeout`."""
        now = time.time() if now is None else now
        with self._lock:
            idle = [e.episode_id for e in self._eps.values()
                    if not e.finished and now - e.last_activity > self.idle_timeout_s]
            for eid in idle:
                self.abandon(eid, TerminalReason.WALL_TIMEOUT, f"no call or finish for {self.idle_timeout_s:g} s")
            if self.finished_ttl_s is not None:
                old = [e.episode_id for e in self._eps.values() if e.finished and now - e.ended > self.finished_ttl_s]
                for eid in old:
                    self._forget(eid)
        return idle

    def _evict(self, n: int) -> None:
        """Forget the `n` (at most) finished episodes that ended first."""
        done = sorted((e for e in self._eps.values() if e.finished), key=lambda e: e.ended)[:n]
        for e in done:
            self._forget(e.episode_id)

    def _forget(self, episode_id: str) -> None:
        self._eps.pop(episode_id, None)
        self._access.pop(episode_id, None)
        self.evicted += 1

    def close(self) -> None:
        """End every open episode as `infra_failure` (the gateway is going away) and close the log."""
        with self._lock:
            for e in list(self._eps.values()):
                if not e.finished:
                    self.abandon(e.episode_id, TerminalReason.INFRA_FAILURE, "the gateway shut down")
            if self._log:
                self._log.close()
                self._log = None

    def pop(self, episode_ids: list[str]) -> list[Episode]:
        """Hand finished episodes to a collector and forget them (the span log keeps them)."""
        with self._lock:
            for eid in episode_ids:
                self._access.pop(eid, None)
            return [self._eps.pop(eid) for eid in episode_ids]

    def stats(self) -> dict:
        with self._lock:
            eps = list(self._eps.values())
            return {"episodes": len(eps), "open": sum(not e.finished for e in eps),
                    "calls": sum(len(e.calls) for e in eps) + len(self._loose),
                    "merges": sum(e.merges for e in eps), "splits": sum(e.splits for e in eps),
                    "evicted": self.evicted}

    # -- internals ----------------------------------------------------------------------------------
    def _end(self, ep: Episode, reason: TerminalReason, comps: dict, weights: dict, raw: dict) -> Episode:
        if reason == TerminalReason.INFRA_FAILURE:
            comps = {k: 0.0 for k in comps}
        ep.terminal_reason, ep.reward_components, ep.reward_weights = reason, comps, weights
        ep.verifier_output, ep.ended, ep.finished = dict(raw), time.time(), True
        ep.trajectories = build_trajectories(ep, env_name=self.env_name, tokenizer_hashes=self.tokenizer_hashes)
        self._write({"record": "episode_end", **ep.summary()})
        return ep

    @staticmethod
    def _last_text(ep: Episode) -> str:
        return ep.calls[-1].text if ep.calls else ""

    def _write(self, obj: dict) -> None:
        if self._log:
            self._log.write(json.dumps(obj, default=str) + "\n")
            self._log.flush()
