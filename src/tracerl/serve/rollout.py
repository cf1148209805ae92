"""Rollouts by an external agent through the gateway: the `run_episodes` signature, so the RL loop
and held-out evaluation take it in place of the in-process agent loop (recipe `gateway.agent`).

Per call: the gateway (started once, in this process, on 127.0.0.1 and a free port) is tagged with
the current policy version and pinned to the sampling the learner scores under; each task becomes
an episode started over HTTP (`POST /v1/episodes`, its task and group ids); the agent runs on a
thread pool against the gateway with the episode in the `X-Episode-Id` header; when it returns, the
episode is finished over HTTP with its task id and the agent's answer (the environment's verifier
scores it); an agent that raises ends its episode as `infra_failure`, one that outlives
`agent_timeout_s` as `wall_timeout`. The episodes' trajectories (exact-prefix merging, split counted)
come back validated, one or more per episode, grouped by `group_id`.

With `rollout.workers: N > 1` (`engines(settings, n)`, set by rollout/ray_backend.py `backend_episodes`)
the gateway fronts N engine processes (serve/engine_pool.py): an episode's calls stay on one engine, concurrent
episodes spread across them, and every engine is synced to the policy version of the call (and again by
`publish` after each update) before any episode starts.

What it departs from: episodes of one call run concurrently and the engine batches whatever
arrives together, so rollouts are not bit-reproducible for a seed the way the in-process loop's are.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import importlib.util
import sys
import uuid
from pathlib import Path

import httpx

from tracerl.contract.roles import TerminalReason
from tracerl.errors import UserError
from tracerl.config.gateway import GatewayConfig
from tracerl.serve.episodes import EnvVerifier, EpisodeRegistry
from tracerl.serve.gateway import Gateway


def load_agent(ref: str):
    """`path/file.py:function` (relative to the working directory or the source checkout) or `module:function`."""
    if ":" not in ref:
        raise UserError(f"gateway.agent {ref!r} must name a function: 'path/to/agent.py:run_episode' or 'module:function'")
    where, name = ref.rsplit(":", 1)
    if where.endswith(".py"):
        candidates = [Path(where), Path(__file__).resolve().parents[3] / where]
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            raise UserError(f"gateway.agent: no file {where!r} here or in the tracerl checkout; give an existing path")
        spec = importlib.util.spec_from_file_location(f"tracerl_agent_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UserError(f"gateway.agent: {where!r} has no function {name!r}")
    return fn


class GatewayRollout:
    """Callable like `rollout.run_episodes`; owns one gateway for the whole run (`close()` ends it)."""

    def __init__(self, cfg: GatewayConfig, *, span_log: str | Path | None = None):
        self.cfg, self.span_log = cfg, span_log
        self.agent = load_agent(cfg.agent)
        self.gateway = self.server = self.verifier = None
        self.engine_settings, self.n_engines, self.model = None, 1, None
        self.totals = {"episodes": 0, "trajectories": 0, "merges": 0, "splits": 0, "agent_errors": 0, "abandoned": 0}

    def _start(self, engine, spec, budgets, tokenizer_hashes) -> None:
        from tracerl.serve.server import ServerThread

        self.verifier = EnvVerifier(spec, [])
        registry = EpisodeRegistry(verifier=self.verifier, idle_timeout_s=self.cfg.idle_timeout_s, span_log=self.span_log,
                                   env_name=spec.name, tokenizer_hashes=tokenizer_hashes,
                                   finished_ttl_s=None)  # kept until this rollout pops them
        max_batch = max(16, self.cfg.concurrency)
        pool = None
        if self.n_engines > 1:
            from tracerl.serve.engine_pool import EnginePool
            from tracerl.serve.engine_proc import EngineProcess

            settings, timeout = self.engine_settings, self.cfg.call_timeout_s
            pool = EnginePool(lambda i, inc: EngineProcess(i, settings, max_batch=max_batch, seed=i + 7_919 * inc,
                                                           timeout_s=timeout), self.n_engines, timeout_s=timeout)
        self.gateway = Gateway(engine, model_name=self.cfg.model_name, registry=registry,
                               default_max_tokens=budgets.max_new_tokens, stop_strings=spec.stop_strings,
                               max_batch=max_batch, max_body_bytes=self.cfg.max_body_bytes,
                               call_timeout_s=self.cfg.call_timeout_s, pool=pool)
        self.server = ServerThread(self.gateway).start()
        self.http = httpx.Client(base_url=self.server.base_url, timeout=60)

    def __call__(self, engine, spec, tasks, group_ids, *, budgets, sampling, policy_version, seed,
                 tokenizer_hashes=None, generator=None, entropy_out=None, **_):
        if self.gateway is None:
            self._start(engine, spec, budgets, tokenizer_hashes)
        gw = self.gateway
        self.verifier.add(tasks)
        gw.sampling_override = dict(sampling)
        if gw.pool is not None:  # every engine holds this version's weights before any episode starts
            gw.pool.sync(self.model if self.model is not None else engine.model, policy_version)
            gw.pool.tell("seed", seed)
        else:
            gw.set_policy_version(policy_version)
            gw.worker._gen.manual_seed(seed)
        eids = [f"{gid}.{i}.{uuid.uuid4().hex[:8]}" for i, gid in enumerate(group_ids)]

        def play(task, gid, eid):
            # the episode starts when its agent does and is finished as soon as it returns, so waiting
            # for a free thread or for the other agents never counts as idle
            r = self.http.post("/episodes", json={"episode_id": eid, "task_id": task.id, "group_id": gid,
                                                  "metadata": {"split": task.split, "task_source": task.source}})
            r.raise_for_status()
            try:
                body = {"task_id": task.id, "answer": str(self.agent(self.server.base_url, self.cfg.model_name,
                                                                     str(task.prompt), eid) or "")}
            except Exception as err:  # the agent failed: infra_failure, never a policy outcome
                body = {"error": f"{type(err).__name__}: {err}"}
            r = self.http.post(f"/episodes/{eid}/finish", json=body)
            if r.status_code != 409:  # 409: it idled out meanwhile (the reaper ended it as wall_timeout)
                r.raise_for_status()
            return body, r.status_code

        pool = cf.ThreadPoolExecutor(self.cfg.concurrency, thread_name_prefix="tracerl-agent")
        futs = [pool.submit(play, t, g, e) for t, g, e in zip(tasks, group_ids, eids)]
        done, _ = cf.wait(futs, timeout=self.cfg.agent_timeout_s * (1 + len(tasks) // self.cfg.concurrency))
        for eid, fut in zip(eids, futs):
            if fut not in done or fut.exception() is not None:
                self.totals["abandoned"] += 1
                if fut not in done:
                    fut.cancel()
                try:
                    gw.registry.get(eid)
                except Exception:  # never started: record it, so it ends labelled like the others
                    gw.registry.start(eid, task_id=next(t.id for t, e in zip(tasks, eids) if e == eid))
                gw.registry.abandon(eid, TerminalReason.WALL_TIMEOUT, "the agent did not return in time")
                continue
            body, status = fut.result()
            self.totals["agent_errors"] += "error" in body
            self.totals["abandoned"] += status == 409
        pool.shutdown(wait=False, cancel_futures=True)
        out = []
        for task, ep in zip(tasks, gw.registry.pop(eids)):
            self.totals["episodes"] += 1
            self.totals["merges"] += ep.merges
            self.totals["splits"] += ep.splits
            for traj in ep.trajectories:
                traj.task_revision, traj.env_revision = task.source_revision, spec.revision
                if entropy_out is not None:
                    entropy_out[traj.trajectory_id] = [e for c in ep.calls if c.span_id in traj.verifier_output["calls"]
                                                       for e in c.entropies]
                out.append(traj)
        self.totals["trajectories"] += len(out)
        return out

    def engines(self, settings, n: int, model=None) -> GatewayRollout:
        """Serve the agent's calls from `n` engine processes built from `settings` (rollout/workers.py
        `WorkerSettings`), synced from `model` (the learner's policy; else the engine's model)."""
        self.engine_settings, self.n_engines, self.model = settings, int(n), model
        return self

    def publish(self, model, version: int) -> None:
        """After an update: every engine to the new version (the in-process engine shares the learner's model)."""
        self.model = model
        if self.gateway is not None and self.gateway.pool is not None:
            self.gateway.pool.sync(model, version)

    def metrics(self) -> dict[str, float]:
        pool = self.gateway.pool if self.gateway is not None else None
        return pool.metrics() if pool is not None else {}

    def close(self) -> None:
        if self.gateway is not None and self.gateway.pool is not None:
            self.totals["engine_calls"] = list(self.gateway.pool.calls)
            self.totals |= self.gateway.pool.counters
        if self.gateway is not None:
            self.http.close()
            self.server.stop()
            self.gateway.close()
            self.gateway = None
