"""Rollout workers: an engine, the agent loop and the environment, holding the policy at a known version.

A worker receives weights by version (`send_weights`), rollout jobs (`submit`: one step's tasks, their
group ids and seed) and returns events (`events`): `started` (the version the job starts at) and
`done` (its validated trajectories, per-token entropies, busy and idle seconds). Two implementations
answer the same calls:

- `InProcessWorker`: runs a job in the caller's thread when `events` is called (the learner decides the
  interleaving: tests, and sync-equivalent runs with no second process);
- `ProcessWorker`: a `torch.multiprocessing` spawn process with one torch thread, its own copy of the
  model, an inbox (weights and jobs, in the order they were sent) and an outbox. Weights travel as the
  bytes of a `torch.save`d state_dict, so a Ray actor can take the same messages later.

A worker's copy is the policy as a plain model (`models/weights.py`): the plain architecture, loaded
with the policy's weights, LoRA adapters merged in; it samples under the policy's autocast and through
the engine the recipe names (`engine.name`: torch, hf, or vllm where installed). `worker_settings`
builds the settings from the learner's model and the recipe (local processes and Ray actors alike).

With `partial_rollouts`, the worker looks into its inbox between the turns of its episodes and loads
new weights there: later turns are sampled by the new version (`run_episodes(on_turn=...)`), and every
ACTION token keeps the version that sampled it.

A worker has its own sampling generator (seed `generator_seed`), consumed job after job, so one worker
running one job per step draws exactly the tokens the synchronous loop draws. A job may instead carry
the sync loop's generator state (`RolloutJob.generator_state`): it is sampled from that state and the
result carries the state it ends in, so the sync loop's rollouts can run in any worker (a Ray actor,
`run.backend: ray`) and draw the same tokens, even when a dead worker's job is re-run elsewhere.
A third implementation, `RayWorker` (rollout/ray_worker.py), hosts the same loop in a Ray actor.

With `rollout.weight_sync: broadcast` a worker is also told to join the weight-broadcast group (a `join`
message, `join_broadcast`), and a weights message may carry a `BroadcastPayload`: the worker then receives
its tensors over that group before loading them (rollout/broadcast_sync.py).
"""

from __future__ import annotations

import collections
import dataclasses
import importlib
import io
import os
import queue
import threading
import time
from typing import Any, Protocol

import torch

from tracerl.contract import Trajectory, validate
from tracerl.contract.task import Task
from tracerl.models.weights import param_dtype
from tracerl.rollout.agent_loop import LoopBudgets, run_episodes


@dataclasses.dataclass
class RolloutJob:
    """Rollouts of a step, or of a share of its groups: each task repeated into its group, sampled with `seed`
    (`group_seeds`: each group from its own generator seeded by (`seed`, group id), rollout/group_seeds.py)."""

    job_id: int  # the step it is meant for (the learner may train it later, if it lands late)
    tasks: list[Task]
    group_ids: list[str]
    seed: int
    budgets: LoopBudgets
    sampling: dict
    attempt: int = 0  # 1 when re-issued after its worker died
    generator_state: torch.Tensor | None = None  # sample from this state instead of the worker's own generator
    group_seeds: bool = False  # rollout.seeding: group (the tokens do not depend on which worker plays the job)
    step: int | None = None  # the step a group-sized job belongs to (None: job_id is the step)


@dataclasses.dataclass
class RolloutResult:
    job_id: int
    worker_id: int
    start_version: int
    trajectories: list[Trajectory]
    entropy: dict[str, list[float]]
    busy_s: float
    idle_s: float  # seconds the worker waited for this job (or for weights) before starting it
    finished_at: float = 0.0
    generator_state: torch.Tensor | None = None  # where the job's generator ended (when the job carried one)


@dataclasses.dataclass
class SpecRef:
    """How a worker process rebuilds the environment spec: import `modules` (they register user envs),
    then `get_env(name)` wrapped with the recipe's faults."""

    name: str
    faults: dict | None = None
    modules: tuple[str, ...] = ()
    tool_parser: str | None = None  # env.tool_format: native with this parser (None: the grammar)
    reward: dict | None = None  # a reward: recipe's section, functions as the driver resolved them (envs/dataset)

    @classmethod
    def for_recipe(cls, recipe) -> SpecRef:
        """The recipe's env, its faults, and the module that registered it (a user env imported by the driver)."""
        from tracerl.envs import get_env

        module = getattr(get_env(recipe.env.name).make, "__module__", None)
        return cls(recipe.env.name, recipe.faults.model_dump() if recipe.faults.active else None,
                   (module,) if module and module != "__main__" else (),
                   recipe.env.tool_parser if recipe.env.tool_format == "native" else None,
                   recipe.reward.model_dump() if getattr(recipe, "reward", None) is not None else None)

    def build(self):
        from tracerl.envs import get_env
        from tracerl.config.faults import FaultsConfig
        from tracerl.rollout.faults import wrap_spec

        for m in self.modules:
            importlib.import_module(m)
        if self.reward is not None:  # the dataset env over the recipe's reward functions, imported here
            from tracerl.envs.dataset import install_in_worker

            install_in_worker(self.reward)
        from tracerl.envs.native_tools import native_spec

        spec = native_spec(get_env(self.name), "native" if self.tool_parser else "grammar", self.tool_parser or "hermes")
        return wrap_spec(spec, FaultsConfig(**self.faults) if self.faults else None)


def weights_blob(model) -> bytes:
    """The policy's weights as a plain model's state_dict, as bytes (what travels to a worker): a LoRA
    policy's adapters merged into the base weights (`models/weights.py`); CPU tensors, so a worker on any
    device (a CPU-only Ray actor beside a cuda learner) reads them."""
    from tracerl.models.weights import plain_state_dict

    buf = io.BytesIO()
    torch.save({k: v.to("cpu", copy=True) for k, v in plain_state_dict(model).items()}, buf)
    return buf.getvalue()


def blob_state(blob: bytes) -> dict[str, torch.Tensor]:
    return torch.load(io.BytesIO(blob), weights_only=True, map_location="cpu")


def load_blob(model, blob: bytes) -> None:
    model.load_state_dict(blob_state(blob))


class RolloutWorker(Protocol):
    worker_id: int

    def send_weights(self, version: int, blob: bytes) -> None: ...

    def submit(self, job: RolloutJob) -> None: ...

    def events(self, timeout: float = 0.0) -> list[tuple]: ...

    def alive(self) -> bool: ...

    @property
    def pid(self) -> int | None: ...

    def close(self) -> None: ...


class Runner:
    """What runs inside any worker: the engine over the worker's model, its env spec and generator."""

    def __init__(self, model, tokenizer, spec, *, generator_seed: int, tokenizer_hashes: dict[str, str],
                 device: str = "cpu", engine=None):
        from tracerl.rollout.engine import TorchEngine

        self.model, self.spec, self.hashes = model, spec, tokenizer_hashes
        self.engine = engine if engine is not None else TorchEngine(model, tokenizer, device=device)
        self.generator = torch.Generator().manual_seed(generator_seed)
        self.version = -1
        self.job_generator_state: torch.Tensor | None = None  # after a job that carried a generator state
        self.receiver = None  # rollout/weight_sync.py: keeps a LoRA policy's base weights for adapter-only syncs
        self.device, self.group = device, None  # group: the weight-broadcast group (rollout/broadcast_sync.py)

    def join(self, spec) -> None:
        """Join the weight-broadcast group `spec` names (leaving the one held before)."""
        self.group = None
        self.group, self.group_device = spec.connect(), "cuda" if spec.backend == "nccl" else "cpu"  # None: given up

    def load(self, version: int, blob) -> None:
        """Weights as `version`: the bytes of a state_dict, a bucketed `WeightsPayload` (rollout/weight_sync.py), or
        a `BroadcastPayload` whose tensors then arrive over the group (rollout/broadcast_sync.py)."""
        if hasattr(blob, "receive"):
            if self.group is None:
                raise RuntimeError("a broadcast weight sync reached a worker that joined no broadcast group")
            blob = blob.receive(self.group, self.group_device)
        if blob is not None and not isinstance(blob, bytes):
            from tracerl.rollout.weight_sync import Receiver

            self.receiver = self.receiver or Receiver()
            if self.model is not None:
                self.receiver.load(self.model, blob)
            else:
                self.engine.load_weights(self.receiver.state(blob), version)
        elif blob is not None:
            if self.model is not None:
                load_blob(self.model, blob)
            else:  # an engine holding the weights itself (vLLM)
                self.engine.load_weights(blob_state(blob), version)
        self.version = version

    def run(self, job: RolloutJob, on_turn=None) -> tuple[list[Trajectory], dict[str, list[float]]]:
        entropy: dict[str, list[float]] = {}
        own = job.generator_state is None
        gen = self.generator if own else torch.Generator().set_state(job.generator_state)
        if job.group_seeds:
            from tracerl.rollout.group_seeds import GroupSeeds

            gen, own = GroupSeeds(job.seed), True
        kw = dict(sampling=job.sampling, policy_version=self.version, seed=job.seed, tokenizer_hashes=self.hashes,
                  generator=gen, entropy_out=entropy, on_turn=on_turn)
        if hasattr(self.spec, "play"):  # several environments (rollout/routes.py): each task in its own, own budgets
            trajs = self.spec.play(self.engine, job.tasks, job.group_ids, budgets=job.budgets, **kw)
        else:
            trajs = run_episodes(self.engine, self.spec, job.tasks, job.group_ids, budgets=job.budgets, **kw)
        self.job_generator_state = None if own else gen.get_state()
        return trajs, entropy


class InProcessWorker:
    """A worker in the caller's process: `events` runs the oldest submitted job to its end.

    `share` runs it on the learner's own model (weights are then always current: `send_weights` only
    records the version); otherwise on a private copy loaded from each blob.
    """

    def __init__(self, worker_id: int, runner: Runner, *, share: bool = False, on_turn=None):
        self.worker_id, self.runner, self.share, self.on_turn = worker_id, runner, share, on_turn
        self.jobs: collections.deque[RolloutJob] = collections.deque()
        self.idle_since = time.time()

    def send_weights(self, version: int, blob: bytes) -> None:
        self.runner.load(version, None if self.share else blob)

    def submit(self, job: RolloutJob) -> None:
        self.jobs.append(job)

    def events(self, timeout: float = 0.0) -> list[tuple]:
        if not self.jobs:
            return []
        job, t0 = self.jobs.popleft(), time.time()
        started = ("started", self.worker_id, job.job_id, self.runner.version)
        trajs, ent = self.runner.run(job, self.on_turn)
        res = RolloutResult(job.job_id, self.worker_id, started[3], trajs, ent, time.time() - t0,
                            t0 - self.idle_since, time.time(), self.runner.job_generator_state)
        self.idle_since = time.time()
        return [started, ("done", res)]

    def alive(self) -> bool:
        return True

    @property
    def pid(self) -> int | None:
        return os.getpid()

    def close(self) -> None:
        self.jobs.clear()


@dataclasses.dataclass
class WorkerSettings:
    """Everything a worker process needs to build its runner (all picklable)."""

    model_class: type
    model_config: Any
    tokenizer: Any
    spec: SpecRef
    generator_seed: int
    tokenizer_hashes: dict[str, str]
    partial_rollouts: bool = True
    threads: int = 1
    device: str = "cpu"  # where the worker's model and engine run (a Ray actor given a GPU: "cuda")
    dtype: str = "float32"  # the learner's parameter dtype: the worker samples the same weights, not an upcast copy
    autocast: str | None = None  # model.autocast: the worker's forwards run under it, as the learner's
    engine: str = "torch"  # engine.name: torch / hf on the worker's copy, vllm loading its own
    engine_kwargs: dict = dataclasses.field(default_factory=dict)  # vllm: model_dir, dtype, seed, memory, lengths
    prepack: bool | str = False  # engine.prepack: the torch engine's linear layers on packed weights (models/prepack.py)
    engine_threads: int | None = None  # engine.threads: intra-op threads while the torch engine samples
    lean_decode: bool | None = None  # engine.lean_decode: decode steps without the HF forward (lean_decode.py)


def worker_model(settings: WorkerSettings):
    """The worker's own copy of the policy's plain architecture, in the learner's dtype (or engine.dtype), on
    its device, under the policy's autocast."""
    from tracerl.models.precision import set_autocast

    model = settings.model_class(settings.model_config).to(device=settings.device, dtype=getattr(torch, settings.dtype))
    return set_autocast(model, settings.autocast)


def worker_engine(settings: WorkerSettings, model, tokenizer):
    """The engine a worker samples with: `settings.engine` over the worker's `model` (None for vllm, which
    loads the model from `engine_kwargs["model_dir"]` and takes each version's weights itself)."""
    from tracerl.rollout.engine import TorchEngine

    if settings.engine == "torch":
        if settings.prepack:  # the worker's copy is its own: its layers are packed in place
            from tracerl.models.prepack import prepack

            prepack(model, half=settings.prepack == "float16")
        from tracerl.errors import UserError
        from tracerl.rollout.engines import lean_decode_problem

        problem = lean_decode_problem(settings.lean_decode, model)
        if problem:
            raise UserError(problem)
        return TorchEngine(model, tokenizer, device=settings.device, threads=settings.engine_threads,
                           lean_decode=settings.lean_decode is not False)
    if settings.engine == "hf":
        from tracerl.rollout.hf_engine import HFGenerateEngine

        return HFGenerateEngine(model, tokenizer)  # the worker's copy is its own: a load is a load_blob
    from tracerl.rollout.vllm_engine import VLLMEngine

    return VLLMEngine.build(tokenizer=tokenizer, **settings.engine_kwargs)


def worker_settings(model, tokenizer, recipe, spec_ref, hashes: dict[str, str], *, seed: int, partial: bool,
                    threads: int = 1, device: str | None = None) -> WorkerSettings:
    """The settings of a rollout worker sampling the learner `model`'s policy (a spawned process: `device`
    None, the learner's device; a Ray actor: the device its resources give): the plain architecture, its
    dtype, the recipe's autocast and engine."""
    from tracerl.models.device import model_device
    from tracerl.models.weights import plain_architecture

    cls, config = plain_architecture(model)
    engine = recipe.engine
    dtype = (engine.dtype if engine.name in ("hf", "torch") else None) or param_dtype(model)
    autocast = getattr(recipe.model, "autocast", None)
    if engine.name == "torch":
        from tracerl.rollout.engines import copy_precision

        dtype, autocast = copy_precision(engine, dtype, autocast)
    kwargs = {}
    if engine.name == "vllm":
        from tracerl.rollout.vllm_engine import vllm_dtype, vllm_model_dir

        kwargs = dict(model_dir=vllm_model_dir(model), dtype=vllm_dtype(recipe, model), seed=seed,
                      gpu_memory_utilization=engine.gpu_memory_utilization,
                      max_model_len=engine.max_model_len or recipe.env.max_tokens, enforce_eager=engine.enforce_eager)
    return WorkerSettings(cls, config, tokenizer, spec_ref, generator_seed=seed, tokenizer_hashes=hashes,
                          partial_rollouts=partial, threads=threads, device=device or str(model_device(model)),
                          dtype=dtype, autocast=autocast, engine=engine.name,
                          engine_kwargs=kwargs, prepack=engine.prepack, engine_threads=engine.threads,
                          lean_decode=engine.lean_decode)


def exit_with_parent(parent: int, interval: float = 1.0) -> threading.Thread:
    """End this process when `parent` is no longer its parent (the learner was killed: SIGKILL, SIGTERM,
    out of memory), so a rollout worker never outlives the run that started it. A daemon thread polls
    `os.getppid()`; a re-parented process sees another pid."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os._exit(0)

    t = threading.Thread(target=watch, name="tracerl-exit-with-parent", daemon=True)
    t.start()
    return t


def _worker_main(worker_id: int, settings: WorkerSettings, inbox, outbox) -> None:
    exit_with_parent(os.getppid())
    torch.set_num_threads(settings.threads)
    from tracerl.config.faults import FaultsConfig
    from tracerl.rollout.faults import wrap_engine

    model = None if settings.engine == "vllm" else worker_model(settings)
    if model is not None:
        model.eval()
    runner = Runner(model, settings.tokenizer, settings.spec.build(), generator_seed=settings.generator_seed,
                    tokenizer_hashes=settings.tokenizer_hashes, device=settings.device,
                    engine=worker_engine(settings, model, settings.tokenizer))
    faults = settings.spec.faults  # faults.engine_error: failing rows, as in the trainer's engine
    runner.engine = wrap_engine(runner.engine, FaultsConfig(**faults) if faults else None)
    jobs: collections.deque[RolloutJob] = collections.deque()
    waited = 0.0

    def handle(msg) -> bool:
        if msg[0] == "weights":
            t0 = time.perf_counter()
            runner.load(msg[1], msg[2])
            outbox.put(("loaded", worker_id, msg[1], time.perf_counter() - t0))
        elif msg[0] == "job":
            jobs.append(msg[1])
        elif msg[0] == "join":  # the weight-broadcast group, formed or re-formed (rollout/broadcast_sync.py)
            runner.join(msg[1])
        return msg[0] != "stop"

    def drain() -> bool:
        while True:
            try:
                msg = inbox.get_nowait()
            except queue.Empty:
                return True
            if not handle(msg):
                return False

    def on_turn() -> int:  # between turns: new weights land here (a partial rollout)
        drain()
        return runner.version

    while True:
        if not jobs:
            t0 = time.time()
            if not handle(inbox.get()):
                return
            waited += time.time() - t0
        if not drain():
            return
        if not jobs or runner.version < 0:
            continue
        job, t0, v0 = jobs.popleft(), time.time(), runner.version
        outbox.put(("started", worker_id, job.job_id, v0))
        trajs, ent = runner.run(job, on_turn if settings.partial_rollouts else None)
        outbox.put(("done", RolloutResult(job.job_id, worker_id, v0, trajs, ent, time.time() - t0, waited, time.time(),
                                          runner.job_generator_state)))
        waited = 0.0


class ProcessWorker:
    """A rollout worker in its own spawned process (on `settings.device`, `settings.threads` torch threads)."""

    def __init__(self, worker_id: int, settings: WorkerSettings):
        import torch.multiprocessing as mp

        ctx = mp.get_context("spawn")
        self.worker_id = worker_id
        self.inbox, self.outbox = ctx.Queue(), ctx.Queue()
        self.proc = ctx.Process(target=_worker_main, args=(worker_id, settings, self.inbox, self.outbox),
                                name=f"tracerl-rollout-{worker_id}", daemon=True)
        self.proc.start()

    def send_weights(self, version: int, blob: bytes) -> None:
        self.inbox.put(("weights", version, blob))

    def join_broadcast(self, spec) -> None:
        self.inbox.put(("join", spec))

    def submit(self, job: RolloutJob) -> None:
        self.inbox.put(("job", job))

    def events(self, timeout: float = 0.0) -> list[tuple]:
        out = []
        try:
            out.append(self.outbox.get(timeout=timeout) if timeout > 0 else self.outbox.get_nowait())
            while True:
                out.append(self.outbox.get_nowait())
        except (queue.Empty, EOFError, OSError):
            pass
        return out

    def alive(self) -> bool:
        return self.proc.exitcode is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def close(self) -> None:
        if self.alive():
            try:
                self.inbox.put(("stop",))
            except (OSError, ValueError):
                pass
            self.proc.join(timeout=5)
        if self.alive():
            self.proc.kill()
            self.proc.join(timeout=5)
        for q in (self.inbox, self.outbox):
            q.cancel_join_thread()
            q.close()


def validated(result: RolloutResult) -> RolloutResult:
    """The result with every trajectory re-validated on the learner's side of the queue."""
    for t in result.trajectories:
        validate(t)
    return result
